#!/usr/bin/env bash
# Installs the programs the tests run besides cargo, when missing: `promtool` (Debian's
# `prometheus`: the metrics tests check the scrape with `promtool check metrics`) and headless
# Chromium with its WebDriver (`chromium`, `chromium-driver`: the dashboard test). Root only,
# with apt-get, without recommends, and without letting the `prometheus` package start a
# server (a policy-rc.d that refuses service starts while apt runs, when the machine has none).
#
# Usage: scripts/test_tools.sh        (scripts/test.sh runs it first)
set -euo pipefail

missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
[ ${#missing[@]} -eq 0 ] && exit 0

if [[ "$(id -u)" != 0 ]]; then
    echo "test_tools.sh: missing and not root: install ${missing[*]} (Debian) first" >&2
    exit 1
fi
echo "test_tools.sh: installing ${missing[*]} with apt-get" >&2
own_policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    own_policy=1
fi
installed=0
{ apt-get update -q >&2 &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; } ||
    installed=$?
if [ -n "$own_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
exit "$installed"
