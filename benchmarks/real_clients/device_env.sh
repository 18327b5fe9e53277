# Sourced by the device_*.sh scripts: the GPU image lacks msgspec and nvtx, carried as wheels in
# .whl/ (run's `carry`); roofscope itself comes from this checkout. Sets OUT for the outputs.
if [ -d /tmp/site/msgspec ]; then   # installed already (device_parallel.sh does it once for its chains)
  export PYTHONPATH=/tmp/site:$PWD
elif ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 OUT=${OUT:-out}
