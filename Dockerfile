# One image for every pdserve role: `pdserve operator`, `pdserve planner run`,
# `pdserve router`, `pdserve worker` (the mock vLLM worker). The chart and the operator
# pick the role with the container's args.
#
#   docker build -t pdserve:dev .
#   docker run --rm -p 8000:8000 pdserve:dev worker facebook/opt-125m --port 8000

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# Build a wheel and install it with its dependencies into a self-contained venv,
# so the runtime stage needs neither the sources nor a compiler.
RUN python -m venv /opt/pdserve \
 && /opt/pdserve/bin/pip install --upgrade pip \
 && /opt/pdserve/bin/pip install .

FROM python:3.11-slim
LABEL org.opencontainers.image.title="pdserve" \
      org.opencontainers.image.description="Prefill/decode disaggregated LLM serving: operator, planner, router, mock vLLM worker" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/pdserve/pdserve"
COPY --from=build /opt/pdserve /opt/pdserve
# A fixed numeric uid so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
RUN groupadd --system --gid 10001 pdserve \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --shell /usr/sbin/nologin pdserve
ENV PATH=/opt/pdserve/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib
USER 10001:10001
WORKDIR /tmp
# 8000: OpenAI API + /metrics (worker, router); 5600: NIXL side channel; 5557: KV events;
# 8080: operator liveness; 9091: planner metrics.
EXPOSE 8000 5600 5557 8080 9091
ENTRYPOINT ["pdserve"]
CMD ["--help"]
