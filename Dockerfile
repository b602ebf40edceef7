FROM python:3.12-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
RUN pip install --no-cache-dir -e .
COPY . .
RUN pip install --no-cache-dir -e .
EXPOSE 8000
CMD ["gunicorn", "-c", "config/gunicorn.py", "config.wsgi"]
