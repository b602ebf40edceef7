"""Headroom's pure sizing core: numpy + frozen dataclasses, no Django.

Chain (forward from traffic): memory -> steptime -> operating -> littles -> headroom -> cost
-> breakeven; ``chain.predict_rows`` and ``chain.plan`` are the public entry points.
"""
