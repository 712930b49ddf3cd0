# Install rules and the Debian package (CPack DEB), included by the
# top-level CMakeLists.txt. `deploy/package.sh` builds the package; from a
# configured build dir, `cpack -G DEB` (or `ninja package`) does the same.
#
# Layout (FHS; `cpack` installs with the prefix /usr):
#   PREFIX/bin/                    vigil-server vigil-agent vigil-actuator
#                                  vigilctl vigil-replay vigil-sim
#   PREFIX/share/vigil/web/        the web UI (web/ with web/vendor)
#   PREFIX/share/doc/vigil/        README.md, docs/*.md, systemd.md
#                                  (deploy/systemd/README.md), examples/
#   PREFIX/share/bash-completion/completions/vigilctl
#   /lib/systemd/system/           the four units of deploy/systemd, their
#                                  /usr/local paths rewritten to PREFIX
#   /etc/vigil/                    server.json agent.json agent.env
#                                  actuator.env: dpkg conffiles (local edits
#                                  are kept on upgrade)
# The package's maintainer scripts (deploy/debian/) add the `vigil` user,
# /var/lib/vigil*, /etc/vigil/actuator.secret, and start nothing.
#
# The same rules serve `cmake --install BUILD [--prefix P]`: there an
# existing /etc/vigil file is kept (as deploy/install.sh does), unless
# DESTDIR is set (a staging root, as cpack uses).

set(VIGIL_BINARIES vigil-server vigil-agent vigil-actuator vigilctl vigil-replay vigil-sim)
set(VIGIL_UNITS vigil-server vigil-server-cluster vigil-agent vigil-actuator)

# Directories 0755 whatever the umask of whoever runs cpack.
set(CMAKE_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
    OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
set(_vigil_0644 OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)

install(TARGETS ${VIGIL_BINARIES} RUNTIME DESTINATION bin)

# The web UI needs web/vendor (uPlot), which scripts/vendor-web.sh fills
# from npm: refuse to install a UI without its chart library.
install(CODE "
  if(NOT EXISTS \"${CMAKE_SOURCE_DIR}/web/vendor/uPlot.iife.min.js\")
    message(FATAL_ERROR \"web/vendor/uPlot.iife.min.js is missing: run scripts/vendor-web.sh first\")
  endif()")
install(DIRECTORY web/ DESTINATION share/vigil/web
        FILE_PERMISSIONS ${_vigil_0644}
        PATTERN ".*" EXCLUDE PATTERN "*~" EXCLUDE)

install(FILES README.md DESTINATION share/doc/vigil PERMISSIONS ${_vigil_0644})
install(DIRECTORY docs/ DESTINATION share/doc/vigil
        FILE_PERMISSIONS ${_vigil_0644}
        FILES_MATCHING PATTERN "*.md" PATTERN "screenshots" EXCLUDE)
install(FILES deploy/systemd/README.md DESTINATION share/doc/vigil
        RENAME systemd.md PERMISSIONS ${_vigil_0644})
install(FILES deploy/examples/vigil-escalation.json
              deploy/examples/lab-100-gpus.json deploy/examples/cluster-10000-gpus.json
              deploy/systemd/server.json deploy/systemd/server.env
              deploy/systemd/vigil-server-cluster.json
              deploy/systemd/agent.json deploy/systemd/agent.env
              deploy/systemd/actuator.env
        DESTINATION share/doc/vigil/examples PERMISSIONS ${_vigil_0644})
install(FILES deploy/nginx/vigil.conf DESTINATION share/doc/vigil/examples
        RENAME nginx-vigil.conf PERMISSIONS ${_vigil_0644})
install(FILES deploy/completion/vigilctl.bash
        DESTINATION share/bash-completion/completions
        RENAME vigilctl PERMISSIONS ${_vigil_0644})

# Units and /etc/vigil: done at install time (cmake/VigilInstallSystemFiles.cmake),
# because the units name the install prefix, known only then.
install(CODE "
  set(VIGIL_SOURCE_DIR \"${CMAKE_SOURCE_DIR}\")
  set(VIGIL_GENERATED_DIR \"${CMAKE_BINARY_DIR}/vigil-install\")
  set(VIGIL_UNITS \"${VIGIL_UNITS}\")")
install(SCRIPT cmake/VigilInstallSystemFiles.cmake)

# --- The Debian package ------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME vigil)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "Vigil")
set(CPACK_PACKAGE_CONTACT "Vigil maintainers <vigil-maintainers@example.com>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "GPU training cluster monitor: server, node agent, actuator, CLI")
set(CPACK_PACKAGE_DESCRIPTION
"Vigil watches large-model training clusters. vigil-agent runs on every
GPU node and streams GPU, NIC, disk and training-step metrics over gRPC;
vigil-server stores them in RocksDB, runs its detectors, raises incidents,
escalates them to the on-call person and serves a web UI and HTTP API;
vigil-actuator performs automatic actions on Slurm or Kubernetes; vigilctl
is the operator CLI; vigil-replay and vigil-sim replay and simulate.

The systemd units are installed but neither enabled nor started: edit
/etc/vigil first (see /usr/share/doc/vigil/systemd.md).")
set(CPACK_PACKAGE_HOMEPAGE_URL "https://vigil.example.com")
set(CPACK_DEBIAN_PACKAGE_NAME vigil)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)          # vigil_VERSION-1_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Architecture: CPack asks `dpkg --print-architecture`.
# Runtime libraries (gRPC, protobuf, RocksDB, Abseil, curl, ...): computed
# by dpkg-shlibdeps (package dpkg-dev) from the binaries' NEEDED entries.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# postinst creates the user with adduser.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libnvidia-ml1")
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_SOURCE_DIR}/deploy/debian/conffiles
    ${CMAKE_SOURCE_DIR}/deploy/debian/postinst
    ${CMAKE_SOURCE_DIR}/deploy/debian/prerm
    ${CMAKE_SOURCE_DIR}/deploy/debian/postrm)
# Scripts 0755, conffiles 0644, whatever their mode in the checkout.
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# RelWithDebInfo binaries carry DWARF; the package ships them stripped.
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGE_CHECKSUM SHA256)
set(CPACK_SOURCE_GENERATOR "")
include(CPack)
