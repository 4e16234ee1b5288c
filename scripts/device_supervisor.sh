# Sourced by the device scripts that run their service under supervisord (device_campaign.sh,
# device_tf_campaign.sh, device_model_budget.sh): the supervisorctl the campaign's service manager calls, and
# the supervisord.conf of one program.

# supervisor_shim W PY: $W/bin/supervisorctl runs PY's supervisor (put $W/bin on PATH).
supervisor_shim() {
  mkdir -p "$1/bin"
  printf '#!/bin/sh\nexec %s -m supervisor.supervisorctl "$@"\n' "$2" > "$1/bin/supervisorctl"
  chmod +x "$1/bin/supervisorctl"
}

# supervisor_conf W PROGRAM COMMAND ENVIRONMENT STOPWAITSECS: $W/supervisord.conf with one program, started at
# once and never restarted by supervisord (the campaign stops and starts it), its output in $W/PROGRAM.log.
supervisor_conf() {
  cat > "$1/supervisord.conf" <<CONF
[unix_http_server]
file=$1/supervisor.sock
[supervisord]
logfile=$1/supervisord.log
pidfile=$1/supervisord.pid
[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
[supervisorctl]
serverurl=unix://$1/supervisor.sock
[program:$2]
command=$3
environment=$4
autostart=true
autorestart=false
startsecs=0
stopwaitsecs=$5
stdout_logfile=$1/$2.log
redirect_stderr=true
CONF
}

# tfserve_conf W PY MODEL_DIR PORT DEVICE: the program `tfserve`, transformers serve on MODEL_DIR, offline.
tfserve_conf() {
  supervisor_conf "$1" tfserve \
    "$2 -m transformers.cli.transformers serve $3 --host 127.0.0.1 --port $4 --device $5 --log-level info" \
    "PYTHONPATH=\"${PYTHONPATH:-}\",HF_HUB_OFFLINE=\"1\",TRANSFORMERS_OFFLINE=\"1\",TOKENIZERS_PARALLELISM=\"false\"" 15
}
