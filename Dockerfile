# One image for the API, the workers and the fake upstream (compose.yaml picks the command).
FROM python:3.11-slim
WORKDIR /srv/relay
COPY requirements.txt pyproject.toml ./
RUN pip install --no-cache-dir -r requirements.txt
COPY app ./app
COPY actors ./actors
COPY adapters ./adapters
COPY schemas ./schemas
RUN pip install --no-cache-dir --no-deps -e .
ENV RELAY_BATCH_PAYLOAD_DIR=/var/lib/relay/batch-payloads
EXPOSE 8080
CMD ["relay", "api", "--bind", "0.0.0.0:8080"]
