# Two images. The default (last) stage is Relay itself (API, workers, migrations; compose.yaml picks the command):
# the runtime packages and requirements.txt only, no devtools. The `fake-upstream` stage is the demo's fake
# OpenAI/Anthropic server (devtools/fake_upstream, aiohttp only), built for compose's fake-upstream service.

FROM python:3.11-slim AS fake-upstream
WORKDIR /srv/relay
COPY requirements-dev.txt ./
RUN pip install --no-cache-dir "$(grep '^aiohttp==' requirements-dev.txt)"
COPY devtools/__init__.py ./devtools/
COPY devtools/fake_upstream ./devtools/fake_upstream
EXPOSE 9100
CMD ["python", "-m", "devtools.fake_upstream", "--host", "0.0.0.0", "--any-address", "--port", "9100"]

FROM python:3.11-slim AS relay
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
