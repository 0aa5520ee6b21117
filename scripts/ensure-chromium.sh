#!/usr/bin/env bash
# Headless Chromium for the report test. Installed from Debian's packages when missing and
# this machine allows it; otherwise the test that needs it is skipped with a reason.
set -u
command -v chromium >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "orchestra: installing chromium (for the report.html test)..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || \
    echo "orchestra: chromium could not be installed; the report.html test will be skipped" >&2
fi
exit 0
