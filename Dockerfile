# bonusjudge service image: `bonusjudge serve` on port 8000. The same process the cluster demo
# (scripts/cluster-demo.sh) starts twice; compose.yaml wires two of them to Redis and Postgres.
FROM python:3.11-slim
WORKDIR /app
ENV PIP_NO_CACHE_DIR=1 LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 BONUSJUDGE_CACHE_DIR=/data/cache BONUSJUDGE_DATA_DIR=/data/service
# torch first and alone, pinned to the CPU build (an unpinned torch pulls a multi-GB CUDA build).
COPY constraints.txt ./
RUN pip install -c constraints.txt torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
    --extra-index-url https://pypi.org/simple
COPY pyproject.toml README.md ./
# the light client (the wire contract) first: everything below stands on it
COPY client client
COPY core core
COPY rubrics rubrics
COPY judge judge
COPY calibration calibration
COPY api api
COPY cli cli
# standins/ is the stand-in judge server alone (python -m standins.openai_server, a judge without
# an API key); the tests and their helpers (tests/helpers) stay out of the image.
COPY standins standins
RUN pip install -c constraints.txt ./client . && useradd --create-home bonusjudge \
    && mkdir -p /data && chown bonusjudge /data
USER bonusjudge
EXPOSE 8000
# A non-loopback address needs API keys (BONUSJUDGE_API_KEYS); the service refuses to start
# without them. The judge comes from BONUSJUDGE_JUDGE__* (model, api_base, ...).
CMD ["bonusjudge", "serve", "--host", "0.0.0.0", "--port", "8000"]
