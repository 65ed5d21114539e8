# The CUDA image built and run (tests/deploy/container_cuda_test.py), included from
# tests/debian13/CMakeLists.txt: deploy/docker/Dockerfile.cuda's default target (its build stage
# compiles the whole service with CUDA LibTorch 2.6, CUDA 12.4 and NCCL 2.22 from Debian 13
# packages, CUDNN=stub) with buildah (--isolation chroot, vfs storage in a temporary folder), on
# a debian:trixie base imported from scripts/debian13.sh's cached minbase root (no registry).
# Then `buildah run` in the image: ldd of every binary, no -dev package or compiler, --help of
# every binary, rdattn-gpu-info, sshd's config, and a tiny rdattn-train job on the CPU to the end.
# Needs root, buildah and debootstrap (scripts/setup.sh) and the Debian mirror; exit 77 (skipped)
# only when buildah or debootstrap is absent or not root. The build log is kept in the build
# folder (debian13_docker.build.log). The ccache of the image's build stage persists in
# $RDATTN_DEBIAN13_CACHE/image-build-cache, so only the first run compiles everything.
find_program(RDATTN_SYSTEM_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
add_test(NAME debian13_docker
         COMMAND ${RDATTN_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/tests/deploy/container_cuda_test.py
                 --source ${PROJECT_SOURCE_DIR} --mode full
                 --log ${PROJECT_BINARY_DIR}/debian13_docker.build.log)
set_tests_properties(debian13_docker PROPERTIES TIMEOUT 3600 LABELS "deploy;debian13;debian13_docker;container"
                     SKIP_RETURN_CODE 77 RESOURCE_LOCK container)
