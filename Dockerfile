# summarize for an NVIDIA GPU host: `summarize worker` with vLLM's CUDA build, plus Flower.
#
#   docker build -t summarize .
#   docker run --rm --init --gpus 1 -v summarize-data:/data \
#     -e SUMMARIZE_DATABASE_URL=postgresql://… -e SUMMARIZE_BROKER_URL=redis://:…@… summarize worker
#
# The CUDA libraries come inside PyPI's torch wheels that vLLM pins, so a plain Python image is
# enough: the host needs only the NVIDIA driver and the NVIDIA Container Toolkit. There is no
# CUDA toolkit (nvcc) in the image; vLLM then turns FlashInfer's JIT kernels off with a warning
# and uses its own Triton and PyTorch kernels. docker-compose.yml and docs/deploy.md run it.
FROM python:3.11-slim-bookworm

# gcc and libc6-dev: Triton compiles a small launcher with the system C compiler the first time
# vLLM runs one of its kernels, and fails with "Failed to find C compiler" without one.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# The dependencies first, read from pyproject.toml alone, so that a change to the code does not
# download vLLM and torch (several GB) again. Flower watches the queue (the `flower` service).
COPY pyproject.toml ./
RUN python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
print("\n".join(p["dependencies"] + p["optional-dependencies"]["gpu"]))' > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt "flower>=2.0,<3" \
    && rm /tmp/requirements.txt

# Then the code, installed the way the README says (everything it needs is already there).
COPY . .
RUN scripts/install gpu

# A user without privileges owns /data. Docker copies this ownership into a new named volume
# mounted there; a bind-mounted host folder must be writable by uid 1000.
RUN useradd --create-home --uid 1000 --user-group summarize \
    && mkdir -p /data \
    && chown summarize:summarize /data

# /data holds the default model (models/), Hugging Face downloads when SUMMARIZE_MODEL is a
# model id (huggingface/), vLLM's and Triton's compiled kernels (cache/, so a restart does not
# compile them again), and the SQLite file and embedded Redis when no URLs are set.
ENV SUMMARIZE_DATA_DIR=/data \
    HF_HOME=/data/huggingface \
    VLLM_CACHE_ROOT=/data/cache/vllm \
    TRITON_CACHE_DIR=/data/cache/triton
VOLUME ["/data"]

USER summarize
ENTRYPOINT ["summarize"]
CMD ["worker"]
