#!/usr/bin/env bash
# ROCm 5.7 from Debian 13 (trixie) for a machine without ROCm, Debian 12 included: hipcc, the HIP runtime and
# headers, ROCm's clang 17 with its device libraries, rocBLAS and hipBLAS. Each .deb is downloaded once into the
# cache (sha256 checked) and unpacked with dpkg -x: nothing is installed, the system keeps its own packages.
# Prints the folder to give as hip.rocm_path (Debian's layout: bin/hipconfig, lib/x86_64-linux-gnu/,
# lib/llvm-17/bin/clang). Usage: ./run --params params/hip.yaml --set hip.rocm_path=$(scripts/rocm-debian.sh) ...
#
# Two things make the unpacked tree usable outside /usr (both are undone by nothing: the tree is the cache's):
# - Debian 13's LLVM 17 needs glibc 2.38 (Debian 12 has 2.36): clang, lld and the other LLVM programs are
#   pointed at Debian 13's own libc, unpacked beside them (patchelf: interpreter and RPATH). The libraries
#   ggml-hip links (libamdhip64, rocBLAS, hipBLAS) keep needing glibc 2.38 at run time: on Debian 12 the build is
#   compiled only (knowledge/failures.yaml: hip-rocm-needs-newer-glibc).
# - Debian's hip and hip-lang CMake packages name /usr and /usr/lib/llvm-17 literally: those lines are
#   rewritten to the unpacked folder.
# Needs: curl, dpkg, patchelf (apt install patchelf). Debian's pool drops a package when a point release
# replaces it; then take it from https://snapshot.debian.org/ (same file name, same sha256).
set -euo pipefail
cache="${LLAMA_PLAYBOOK_CACHE:-$HOME/.cache/llama-cpp-playbook}"
mirror="${DEBIAN_MIRROR:-https://deb.debian.org/debian}"
root="$cache/rocm-debian-5.7.1"
downloads="$cache/downloads"
# file in Debian's pool, sha256 (Debian 13 trixie, amd64; from its Packages index)
pins="
pool/main/e/elfutils/libelf1t64_0.192-4_amd64.deb 94497b7e17b6f574a0605b380d454e20d3f01a9c63b70c2a2263f679d30053e1
pool/main/f/fmtlib/libfmt10_10.1.1+ds1-4_amd64.deb da77a5254e5c7cdac6ecf6f8f21a9cc93d64392765f0f0a4dd06805238950fbe
pool/main/g/gcc-14/libgcc-s1_14.2.0-19_amd64.deb 3c71917b490d1a17aed43196a2787a256ecf060526cdb20216a74bedc061b150
pool/main/g/gcc-14/libstdc++6_14.2.0-19_amd64.deb ab1fa05837aa7a92aae748fd07a18a35f7d18bb4a71c4724fe2bbf0e32089de0
pool/main/g/glibc/libc6_2.41-12+deb13u5_amd64.deb b59b0625cd1a791375d40dab23a4d5d3d0641e3d0a773501becdc3725b7f99cf
pool/main/h/hipblas/libhipblas-dev_5.5.1-4_amd64.deb c1316103de353fbff558ec862ec3240eca02e8b9ef78dd9c29c912f8c9801c64
pool/main/h/hipblas/libhipblas0_5.5.1-4_amd64.deb 1fb397bf8b2cb03c5844137adc65254d71169c3b91a1eec5d1380e862e92a760
pool/main/l/llvm-toolchain-17/clang-17_17.0.6-22+b2_amd64.deb 22892d7d2af1084131153600611d7abb3a9fa475c28ae36c548fc7fb377b9de5
pool/main/l/llvm-toolchain-17/clang-tools-17_17.0.6-22+b2_amd64.deb 4824083d34920cf3adea4fe9f21cc440130a19145b82b24fbe305898e3e814dc
pool/main/l/llvm-toolchain-17/libclang-common-17-dev_17.0.6-22+b2_amd64.deb ecaffac9fbb23cabc893e682ebaef38d446f8135dc104c2dbd83e21a599f1810
pool/main/l/llvm-toolchain-17/libclang-cpp17t64_17.0.6-22+b2_amd64.deb 26fc474890552f298eab10986714fff2556181f667e6f1972822b1367e53b325
pool/main/l/llvm-toolchain-17/libclang-rt-17-dev_17.0.6-22+b2_amd64.deb 2137ab76dbb2292464272eb2a9f7f7057e96b586009adb631cf96977f41163a8
pool/main/l/llvm-toolchain-17/libclang1-17t64_17.0.6-22+b2_amd64.deb 14d9527b6e2bb50c9707112e0a5cafe145a8e254c17ee27c60f3f5df32952181
pool/main/l/llvm-toolchain-17/libllvm17t64_17.0.6-22+b2_amd64.deb 7a17e701bac905cc71df20abc674b4ee1b08af99b43d4c153628f23c907b8ee2
pool/main/l/llvm-toolchain-17/lld-17_17.0.6-22+b2_amd64.deb 086d6dc39a3a551c833e30946c02d427e886ab760f0233a29e2cc5c0e6f7b146
pool/main/l/llvm-toolchain-17/llvm-17-dev_17.0.6-22+b2_amd64.deb b6c488958c8754b4636ca45e7d94dd622e5135c8c4278248a13052907124e0ba
pool/main/l/llvm-toolchain-17/llvm-17-linker-tools_17.0.6-22+b2_amd64.deb 96a59e532c37864a93238dd89aab193d459c9f23eca4f0d85828417699383fc9
pool/main/l/llvm-toolchain-17/llvm-17-runtime_17.0.6-22+b2_amd64.deb 7d3f67f7f641d9b44d5e0faa8279924bd9b5da8f03229769f275c62dcd62f50f
pool/main/l/llvm-toolchain-17/llvm-17-tools_17.0.6-22+b2_amd64.deb 0cb841a4f537f7566694c3d35c47b84f7efd1163b98a430cb1febb775ecddae6
pool/main/l/llvm-toolchain-17/llvm-17_17.0.6-22+b2_amd64.deb b7fc9dc915f42c52800f35177b3e5bf9cb74c904377985497a22df6595a685f6
pool/main/libb/libbsd/libbsd0_0.12.2-2_amd64.deb e5a85986fa6bec3307ab1bc860736b478b331882bc45e17675a7bdf88eecb43a
pool/main/libd/libdrm/libdrm-amdgpu1_2.4.124-2_amd64.deb c1d97a5e32e2bc68e833b8abeae026b6306198e87ee4396a7ffecd4779caefbf
pool/main/libd/libdrm/libdrm2_2.4.124-2_amd64.deb fe2276901c7cd7b8079de63072d37fe1cbeb4eb001a3bc1f1d662ad89aa0890e
pool/main/libe/libedit/libedit2_3.1-20250104-1_amd64.deb b002ea172b9c1e34a67bc497c523c67bb74c3f0a4e98113cb083990a1f1d3bfe
pool/main/libf/libffi/libffi8_3.4.8-2_amd64.deb 0ebdc340de33333639c3c63874cd4b15ac2e83dfa1ef3053b7eefaf4919f4f68
pool/main/libm/libmd/libmd0_1.1.0-2+b1_amd64.deb 7244ec3839b61fac0c1884fe08aaa040f26e8f1f35f1f5d3482eacefd30d1b44
pool/main/libx/libxml2/libxml2_2.12.7+dfsg+really2.9.14-2.1+deb13u3_amd64.deb e0c6b63ce4602a036a526f60fe5e6c1586710688058d98fc1001b9b3147b7efd
pool/main/libz/libzstd/libzstd1_1.5.7+dfsg-1_amd64.deb 2f6a2aeacfc925eba8b00ac9139bc4bfccf8cacb09eb93de067074b26948eef9
pool/main/n/ncurses/libtinfo6_6.5+20250216-2_amd64.deb 8b9f6a7983e9418564e48a627518de4c03917b56efe68d7f3e93bd8fffa1cc10
pool/main/n/numactl/libnuma1_2.0.19-1_amd64.deb e578583f73f8208564e5035b18aa729c441fc7ecb389c666923552e123f4d655
pool/main/r/rocblas/librocblas-dev_5.5.1+dfsg-7_amd64.deb 6807acd8e4bcc065559d60e78fb7cd62cd7379da68a5fdcd934410f7f08f5df2
pool/main/r/rocblas/librocblas0_5.5.1+dfsg-7_amd64.deb 951dfa1a46ee275dace455f396640cfc63a47927455a0903b73c4e50030574c1
pool/main/r/rocm-cmake/rocm-cmake_6.3.2-1_all.deb c9a8f8ab58658a01c9ca011c07a10d1db08252512df12a0e5ee403aeaa31ccd8
pool/main/r/rocm-compilersupport/libamd-comgr-dev_6.0+git20231212.4510c28+dfsg-3+b2_amd64.deb 3c8da3f422ef093b77a14d7ba88b6e23fd6a7188281e51cfe0cf5095a0752f23
pool/main/r/rocm-compilersupport/libamd-comgr2_6.0+git20231212.4510c28+dfsg-3+b2_amd64.deb e6de3c9c6b1fa5e6c87882d094484fe0ad0560c61413abd0d28582c4a40de460
pool/main/r/rocm-device-libs/rocm-device-libs-17_6.0+git20231212.5a852ed-2_amd64.deb fa10f0f5be5269c715492e4e3d3816f956a4d8b9098443d54052d351cfda9213
pool/main/r/rocm-hipamd/hipcc_5.7.1-6+deb13u1_amd64.deb 05c223c9cc5524805d478075d1ace1c262c10536837c7adc7425b1c43963ed84
pool/main/r/rocm-hipamd/libamdhip64-5_5.7.1-6+deb13u1_amd64.deb a60c313b59c09d776190a6e70b13337992240227f365ce4b91bb476d47a776d7
pool/main/r/rocm-hipamd/libamdhip64-dev_5.7.1-6+deb13u1_amd64.deb 471242c9d89ce6aca57b2dc75eabbeb872d787f70d3b92144c58bb444e6256a1
pool/main/r/rocm-hipamd/libhiprtc-builtins5_5.7.1-6+deb13u1_amd64.deb badcd2e52f86eeec84a2dda525bd4bb4ae7ffb864dd39f759612bac9a1f6877b
pool/main/r/rocminfo/rocminfo_6.1.2-2_amd64.deb db9f196d4ca4a523132a36805668ef82ab76cc2b850e748b3aa04e67465aa90e
pool/main/r/rocr-runtime/libhsa-runtime-dev_6.1.2-3_amd64.deb 210550164784b6f12067b6cfd8a9386f6855d12a5fdd768b14839c85c35e48c0
pool/main/r/rocr-runtime/libhsa-runtime64-1_6.1.2-3_amd64.deb 5633b84b2f6527b19d70db064cfbbaf37b426f3a1a826316de115c8acb8c196d
pool/main/r/rocsolver/librocsolver-dev_5.5.1-7_amd64.deb 742a5e8d6fcfc71001256ea9df2f05b60a5c22c68b23590716986c1cfedfea4a
pool/main/r/rocsolver/librocsolver0_5.5.1-7_amd64.deb 8b3763a18c7bebc244337432bbef5e1ff4ac4dcf56bba32e766b4070c3afaee0
pool/main/r/roct-thunk-interface/libhsakmt1_6.2.4+ds-1_amd64.deb 1fd49134be5a29e0b978d230ffda6b419421e1237dac77e86131dba9f2037147
pool/main/z/z3/libz3-4_4.13.3-1_amd64.deb 71383373523ef62d47eccf660cf6535c3febcbb3f88e54cb7a43124014b57359
pool/main/z/zlib/zlib1g_1.3.dfsg+really1.3.1-1+deb13u1_amd64.deb 8c27c342230503b73dfde629642c3b352e87b554e06d60cf58772f236a305ceb
"
command -v patchelf >/dev/null || { echo "patchelf not found: apt install patchelf" >&2; exit 1; }
if [ ! -f "$root/.unpacked" ]; then
  mkdir -p "$downloads"
  rm -rf "$root.part" && mkdir -p "$root.part"
  while read -r file sha256; do
    [ -n "$file" ] || continue
    deb="$downloads/$(basename "$file")"
    if [ ! -f "$deb" ] || ! echo "$sha256  $deb" | sha256sum -c --status; then
      curl -fsSL --retry 3 -o "$deb.part" "$mirror/$file"
      echo "$sha256  $deb.part" | sha256sum -c --status || { echo "sha256 mismatch: $mirror/$file" >&2; rm -f "$deb.part"; exit 1; }
      mv "$deb.part" "$deb"
    fi
    dpkg -x "$deb" "$root.part"
  done <<< "$pins"
  # Paths are absolute and final: the tree is patched where it will stay.
  rm -rf "$root" && mv "$root.part" "$root"
  usr="$root/usr"
  libs="$usr/lib/llvm-17/lib:$usr/lib/x86_64-linux-gnu"
  for program in "$usr"/lib/llvm-17/bin/*; do
    [ -L "$program" ] || ! head -c4 "$program" | grep -q ELF || \
      patchelf --set-interpreter "$usr/lib64/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$libs" "$program"
  done
  # RPATH, not RUNPATH: a library's RUNPATH would send its own dependencies (libm) back to the system's glibc.
  find "$usr/lib/llvm-17/lib" "$usr/lib/x86_64-linux-gnu" -maxdepth 1 -name '*.so*' -type f | while read -r lib; do
    case "$(basename "$lib")" in libc.so*|ld-linux*|libm.so*|libpthread*|libdl.so*|librt.so*|libc_malloc*) continue;; esac
    ! head -c4 "$lib" | grep -q ELF || patchelf --force-rpath --set-rpath "$libs" "$lib"
  done
  cmake_dir="$usr/lib/x86_64-linux-gnu/cmake"
  sed -i -e "s|^set(_IMPORT_PREFIX \"/usr\")|set(_IMPORT_PREFIX \"$usr\")|" \
         -e "s|^  set(HIP_CLANG_ROOT \"/usr\")|  set(HIP_CLANG_ROOT \"$usr\")|" \
         -e "s|\"/usr/lib/llvm-17|\"$usr/lib/llvm-17|" \
      "$cmake_dir/hip/hip-targets.cmake" "$cmake_dir/hip-lang/hip-lang-targets.cmake" \
      "$cmake_dir/hip/hip-config-amd.cmake" "$cmake_dir/AMDDeviceLibs/AMDDeviceLibsConfig.cmake"
  "$usr/lib/llvm-17/bin/clang" --version >/dev/null
  touch "$root/.unpacked"
fi
echo "$root/usr"
