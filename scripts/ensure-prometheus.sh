#!/usr/bin/env bash
# Make sure Debian's Prometheus 2.x, VictoriaMetrics and Alertmanager are installed: the
# Prometheus-world tests (tests/test_prom_*.py, tests/test_alert_delivery.py) run the real
# servers on 127.0.0.1 and never skip.
set -euo pipefail
missing=()
command -v prometheus >/dev/null || missing+=(prometheus)
command -v victoria-metrics >/dev/null || missing+=(victoria-metrics)
command -v prometheus-alertmanager >/dev/null || missing+=(prometheus-alertmanager)
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "installing Debian's ${missing[*]} for the Prometheus tests..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # the packages' services are not started here (tests run their own servers)
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  exit 0
fi
echo "error: the Prometheus tests need ${missing[*]}; install with" >&2
echo "       sudo apt-get install -y ${missing[*]}" >&2
exit 1
