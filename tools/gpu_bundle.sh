#!/bin/bash
# make gpu-bundle: the built dpsim and dprun with the shared libraries they load that a GPU machine
# without this project's Debian packages lacks (GSL, cJSON, libcsv, OpenBLAS, OpenMPI with its
# plugins, help files and mpirun), into gpu-bundle/ and gpu-bundle.tar.xz. Left out: the C
# library and the compiler's runtime (the GPU machine's own, newer ones serve), and CUDA (cuBLAS,
# cuBLASLt, cuDNN, NCCL, the driver: the GPU machine has them; env.sh looks for cuDNN where a
# Python wheel put it when /usr/local/cuda has none).
#
# On the GPU machine, from the repository's root:
#   tar xJf gpu-bundle.tar.xz && . gpu-bundle/env.sh &&
#     BUILD=gpu-bundle/bin GPU_OUT=$OUT/gpu-out CHECK_GPU_BUDGET=480 tests/gpu/check_gpu.sh
# (GPU_OUT under the device tool's $OUT: what was written comes back even if the command is cut
# off; the budget leaves the script time to pack its folder before a 600-second limit)
# OpenMPI is relocated with OPAL_PREFIX, which env.sh sets: the bundle keeps its files at their
# Debian paths under gpu-bundle/usr.
set -eu
BUILD=${BUILD:-build}
B=gpu-bundle
rm -rf "$B" "$B.tar.xz"
mkdir -p "$B/bin" "$B/lib"
cp "$BUILD/dpsim" "$BUILD/dprun" "$B/bin/"

# the libraries the binaries (and mpirun) load, but the C library's, the compiler's and CUDA's
ompi_bin=$(readlink -f "$(command -v mpirun)")
for f in "$B/bin/dpsim" "$B/bin/dprun" "$ompi_bin"; do ldd "$f"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
    sort -u | while read -r lib; do
        case "$(basename "$lib")" in
        libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux* | libgcc_s.so.* | libstdc++.so.*) continue ;;
        libcuda.so.* | libcudart.so.* | libcublas* | libcudnn* | libnccl.so.*) continue ;;
        esac
        cp -L "$lib" "$B/lib/"
    done

# OpenMPI's runtime at its Debian paths under $B/usr (OPAL_PREFIX relocates /usr there)
prefix=$(ompi_info --path prefix --parsable 2>/dev/null | sed -n 's/^path:prefix://p')
pkglibdir=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
pkgdatadir=$(ompi_info --path pkgdatadir --parsable 2>/dev/null | sed -n 's/^path:pkgdatadir://p')
libdir=$(ompi_info --path libdir --parsable 2>/dev/null | sed -n 's/^path:libdir://p')
[ "$prefix" = /usr ] || { echo "gpu-bundle: OpenMPI's prefix is '$prefix', not /usr" >&2; exit 1; }
mkdir -p "$B/usr/bin" "$B$pkglibdir" "$B$pkgdatadir" "$B$libdir"
cp -a "$pkglibdir/." "$B$pkglibdir/"
cp -a "$pkgdatadir/." "$B$pkgdatadir/"
cp -L "$ompi_bin" "$B/usr/bin/orterun"
ln -s orterun "$B/usr/bin/mpirun"
for tool in orted; do [ -x "/usr/bin/$tool" ] && cp -L "/usr/bin/$tool" "$B/usr/bin/"; done
# the plugins' own libraries (libmca_common_*) and what they load
cp -a "$libdir/"libmca_common_*.so* "$B$libdir/" 2>/dev/null || true
for p in "$B$pkglibdir/"*.so "$B$libdir/"*.so*; do ldd "$p" 2>/dev/null; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
    sort -u | while read -r lib; do
        case "$(basename "$lib")" in
        libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux* | libgcc_s.so.* | libstdc++.so.*) continue ;;
        libcuda.so.* | libcudart.so.* | libcublas* | libcudnn* | libnccl.so.*) continue ;;
        esac
        [ -e "$B/lib/$(basename "$lib")" ] || cp -L "$lib" "$B/lib/"
    done

cat >"$B/env.sh" <<'EOF'
# Sourced on the GPU machine: the bundle's binaries, libraries and OpenMPI (relocated).
_b=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OPAL_PREFIX="$_b/usr"
export PATH="$_b/usr/bin:$_b/bin:$PATH"
_ld="$_b/lib:$_b/usr/lib/x86_64-linux-gnu/openmpi/lib"
# cuDNN: /usr/local/cuda's, or a Python wheel's (nvidia-cudnn) where the toolkit has none
if [ ! -e /usr/local/cuda/lib64/libcudnn.so.9 ]; then
    _dnn=$(find / -xdev -name 'libcudnn.so.9' -not -path '*/proc/*' 2>/dev/null | head -n 1)
    [ -n "$_dnn" ] && _ld="$_ld:$(dirname "$_dnn")"
fi
export LD_LIBRARY_PATH="$_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "gpu-bundle: dprun $(command -v dprun); LD_LIBRARY_PATH $LD_LIBRARY_PATH"
unset _b _ld _dnn
EOF
tar -cJf "$B.tar.xz" "$B"
echo "gpu-bundle: wrote $B.tar.xz ($(du -h "$B.tar.xz" | cut -f1); $(du -sh "$B" | cut -f1) unpacked)"
