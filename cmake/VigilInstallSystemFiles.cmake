# Run at install time (`cmake --install`, cpack) by the rules of
# cmake/VigilPackaging.cmake, which set VIGIL_SOURCE_DIR, VIGIL_GENERATED_DIR
# and VIGIL_UNITS first. Installs outside the prefix, so both destinations
# are absolute; file(INSTALL) puts $DESTDIR in front of them.
#
# /lib/systemd/system: the units of deploy/systemd name /usr/local (the
# default prefix of deploy/install.sh); they are rewritten to this install's
# prefix, so the package's units run /usr/bin/vigil-* and show
# /usr/share/doc/vigil/systemd.md.
#
# /etc/vigil: the default configs. agent.json is 0644 because
# vigil-agent.service runs as a dynamic user, which is in no group that
# could read a 0640 file (it holds no secret: the TLS key and token are
# passed with LoadCredential=); the others are 0640 (the package's postinst
# gives them group vigil, which vigil-server runs as). A live install
# (no DESTDIR) keeps an operator's existing file, as deploy/install.sh does.

set(_perm_0644 OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
set(_perm_0640 OWNER_READ OWNER_WRITE GROUP_READ)

file(MAKE_DIRECTORY "${VIGIL_GENERATED_DIR}")
foreach(_unit IN LISTS VIGIL_UNITS)
  file(READ "${VIGIL_SOURCE_DIR}/deploy/systemd/${_unit}.service" _text)
  string(REPLACE "/usr/local/" "${CMAKE_INSTALL_PREFIX}/" _text "${_text}")
  file(WRITE "${VIGIL_GENERATED_DIR}/${_unit}.service" "${_text}")
  list(APPEND CMAKE_ABSOLUTE_DESTINATION_FILES "/lib/systemd/system/${_unit}.service")
  file(INSTALL DESTINATION "/lib/systemd/system" TYPE FILE PERMISSIONS ${_perm_0644}
       FILES "${VIGIL_GENERATED_DIR}/${_unit}.service")
endforeach()

foreach(_config server.json agent.json agent.env actuator.env)
  if("$ENV{DESTDIR}" STREQUAL "" AND EXISTS "/etc/vigil/${_config}")
    message(STATUS "Kept: /etc/vigil/${_config} (an existing file is never overwritten)")
    continue()
  endif()
  if(_config STREQUAL "agent.json")
    set(_perm ${_perm_0644})
  else()
    set(_perm ${_perm_0640})
  endif()
  list(APPEND CMAKE_ABSOLUTE_DESTINATION_FILES "/etc/vigil/${_config}")
  file(INSTALL DESTINATION "/etc/vigil" TYPE FILE PERMISSIONS ${_perm}
       FILES "${VIGIL_SOURCE_DIR}/deploy/systemd/${_config}")
endforeach()
