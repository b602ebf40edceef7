"""The form's price section: custom prices, provider, committed discount; the run shows sources."""

import pytest

from planner.models import Scenario
from tests.web.conftest import form_post

pytestmark = pytest.mark.django_db


def test_price_section_saves_and_the_run_shows_its_sources(owner_client, owner, catalog):
    # given a reviewer entering their own H100 price, AWS, reserved with 20 % off
    body = form_post(
        gpu_prices="H100 = $2.50\nL40S: 1.2",
        price_provider="AWS",
        tier="reserved",
        reserved_discount="0.2",
        models=["llama-3.1-8b"],
    )
    response = owner_client.post("/scenarios/new/", body)
    assert response.status_code == 302, response.context["form"].errors
    scenario = Scenario.objects.get(owner=owner)
    assert scenario.gpu_prices == {"h100_sxm": 2.5, "l40s": 1.2}
    assert (scenario.price_provider, scenario.reserved_discount) == ("AWS", 0.2)
    # when the edit form opens, then it shows the prices back under the GPU names
    edit = owner_client.get(f"/scenarios/{scenario.pk}/edit/").content.decode()
    assert "H100 SXM = 2.5" in edit and 'value="AWS" selected' in edit
    # and a run's page lists every price with provider, instance and date
    run = owner_client.post(f"/scenarios/{scenario.pk}/run/", follow=True)
    page = run.content.decode()
    assert 'id="prices-table"' in page
    assert "custom $2.5/GPU-h" in page  # beside the H100 rows' costs


def test_a_bad_price_line_is_shown_beside_its_input(owner_client, catalog):
    response = owner_client.post("/scenarios/new/", form_post(gpu_prices="H100 two dollars"))
    assert response.status_code == 400  # the form page again, with the error beside the input
    errors = response.context["form"].errors["gpu_prices"]
    assert "write GPU = $/GPU-hour" in errors[0]
    response = owner_client.post("/scenarios/new/", form_post(gpu_prices="TPU9 = 2"))
    assert "unknown GPU 'TPU9'" in response.context["form"].errors["gpu_prices"][0]
