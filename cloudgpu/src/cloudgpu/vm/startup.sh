#!/usr/bin/env bash
# The one script every cloud run starts with, on the VM (its user data, startup script or custom
# data), or on this machine for --cloud=local. vm/startup.py writes the run's values above
# the marker line; nothing secret is among them: secrets are read here, with the VM's identity.
#
#   start a watchdog that deletes this VM just before its deadline, whatever hangs (the cloud's
#   own cap takes it at the deadline: a scheduled terminate on AWS, --max-run-duration on GCP)
#   -> on a CPU machine, Docker and the cloud's CLI made sure of; on a GPU machine, wait for its
#   driver -> log in to the registry -> pull the image by digest -> bring back
#   the run's earlier outputs (a resumed or preempted run) -> run the training container ->
#   watch for a preemption notice, the deadline and the container's end, syncing outputs to the
#   bucket as it goes -> on every exit: stop the container (it checkpoints), sync the outputs,
#   the log and status.json, and delete this VM. With --monitor, node_exporter and (on a GPU VM)
#   dcgm-exporter run beside the training container, by digest, and its /metrics is published
#   on the VM: for the cloud's tunnel (invoke monitor --run ID), never to the internet.
set -uo pipefail

# --- the run's values: vm/startup.py writes them here ---

WORK=${WORK:-/var/lib/cloud-gpu-run/$RUN_ID}
OUTPUTS=$WORK/outputs
CONTAINER=train-$RUN_ID
SYNC_EVERY=${SYNC_EVERY:-300}   # seconds between uploads of the outputs while training
REASON=failed                   # what status.json says, unless the run gets further
STARTED=$(date +%s)

log() { echo "[startup $(date -u +%FT%TZ)] $*" >&2; }
docker() { command "${DOCKER:-docker}" "$@"; }  # another client: DOCKER=/usr/bin/docker

# --- the parts that differ between clouds: each a short function ---

bucket_copy() {  # bucket_copy SRC DEST: a folder to or from the bucket (or a local folder)
  case $1$2 in
    *s3://*) aws s3 sync --only-show-errors "$1" "$2" ;;
    *gs://*) gcloud storage rsync --recursive --quiet "$1" "$2" ;;
    *az://*) azure_copy "$1" "$2" ;;
    *) mkdir -p "$2" && cp -a "$1"/. "$2"/ 2>/dev/null || true ;;
  esac
}

azure_copy() {  # az://container/prefix <-> a folder, with the VM's managed identity
  local blob=${2#az://} direction=upload
  [[ $1 == az://* ]] && { blob=${1#az://}; direction=download; }
  if [[ $direction == upload ]]; then
    az storage blob upload-batch --auth-mode login --account-name "$STORAGE_ACCOUNT" \
      --destination "${blob%%/*}" --destination-path "${blob#*/}" --source "$1" \
      --overwrite --only-show-errors >/dev/null
  else
    mkdir -p "$2"
    az storage blob download-batch --auth-mode login --account-name "$STORAGE_ACCOUNT" \
      --source "${blob%%/*}" --pattern "${blob#*/}/*" --destination "$2" --only-show-errors \
      >/dev/null 2>&1 || true
  fi
}

case $CLOUD in
  aws|local)
    imds_token() {
      curl -sf -m 2 -X PUT "$METADATA_URL/latest/api/token" \
        -H "X-aws-ec2-metadata-token-ttl-seconds: 21600" || true
    }
    preempted() {  # the spot instance-action notice: 404 until AWS reclaims the instance
      [[ -n $METADATA_URL ]] || return 1
      curl -sf -m 2 -H "X-aws-ec2-metadata-token: $(imds_token)" \
        "$METADATA_URL/latest/meta-data/spot/instance-action" >/dev/null
    }
    registry_login() {
      aws ecr get-login-password --region "$REGION" \
        | docker login --username AWS --password-stdin "$REGISTRY" >/dev/null
    }
    read_secret() {  # Secrets Manager, with the instance profile's credentials
      if [[ $CLOUD == local ]]; then printenv "$1" || true; return; fi
      aws secretsmanager get-secret-value --region "$REGION" --secret-id "$2" \
        --query SecretString --output text
    }
    delete_self() {  # shutdown behaviour `terminate`: the instance and its disk go
      [[ $CLOUD == aws ]] && shutdown -h now
    } ;;
  gcp)
    preempted() {
      [[ $(curl -sf -m 2 -H "Metadata-Flavor: Google" \
        "$METADATA_URL/computeMetadata/v1/instance/preempted") == TRUE ]]
    }
    registry_login() { gcloud auth configure-docker "$REGISTRY" --quiet >/dev/null 2>&1; }
    read_secret() { gcloud secrets versions access latest --secret "$2" --project "$PROJECT"; }
    delete_self() {  # needs compute.instances.delete; --max-run-duration is the backstop
      gcloud compute instances delete "$RUN_ID" --zone "$ZONE" --project "$PROJECT" --quiet \
        || shutdown -h now
    } ;;
  azure)
    preempted() {  # Scheduled Events: a Preempt event comes at least 30 s ahead
      curl -sf -m 5 -H Metadata:true \
        "$METADATA_URL/metadata/scheduledevents?api-version=2020-07-01" | grep -q '"Preempt"'
    }
    registry_login() {
      az login --identity --resource-id "$IDENTITY" >/dev/null && az acr login --name "${REGISTRY%%.*}"
    }
    read_secret() { az keyvault secret show --vault-name "$KEY_VAULT" --name "$2" --query value -o tsv; }
    delete_self() {  # a shutdown from inside leaves an Azure VM billed: delete its whole group
      az group delete --name "$RUN_ID" --yes --no-wait
    } ;;
  *) log "unknown CLOUD=$CLOUD"; exit 2 ;;
esac

# --- the run ---

# A CPU machine's image (machines.json) may lack what the GPU images carry: Docker, running
# (the ECS image leaves its start to the ECS agent), and the cloud's CLI. Installed from the
# image's own package archive; the training image itself still comes by digest.
host_tools() {
  if ! command -v docker >/dev/null 2>&1; then
    log "installing Docker"
    if command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
    else
      dnf install -y -q docker >/dev/null
    fi
  fi
  systemctl start docker >/dev/null 2>&1 || true
  case $CLOUD in
    aws) command -v aws >/dev/null 2>&1 || dnf install -y -q awscli-2 >/dev/null ;;
    gcp) command -v gcloud >/dev/null 2>&1 || snap install google-cloud-cli --classic >/dev/null ;;
  esac || return 1
  for _ in $(seq 30); do docker info >/dev/null 2>&1 && return 0; sleep 2; done
  return 1
}

sync_outputs() { bucket_copy "$OUTPUTS" "$BUCKET/outputs"; }

start_exporters() {  # one `docker run --detach` per line of $EXPORTERS (vm/exporters.py)
  local line exporter=()
  while IFS= read -r line; do
    [[ -n $line ]] || continue
    eval "exporter=($line)"
    docker run --detach "${exporter[@]}" >/dev/null || log "an exporter did not start: $line"
  done <<<"$EXPORTERS"
}

stop_exporters() {
  local ids=()
  mapfile -t ids < <(docker ps --all --quiet --filter "name=-exporter-$RUN_ID\$")
  (( ${#ids[@]} == 0 )) || docker rm --force "${ids[@]}" >/dev/null 2>&1 || true
}

stop_training() {  # SIGTERM: the trainer writes its last checkpoint and exits 143
  docker stop --time "${1:-${STOP_GRACE:-90}}" "$CONTAINER" >/dev/null 2>&1 || true
}

watchdog() {  # on its own, from the start: whatever hangs (the driver, a pull, the teardown),
  # the machine goes before its deadline, when the cloud's own cap would take it anyway
  local nap=""
  trap 'kill "$nap" 2>/dev/null; exit 0' TERM
  while (( $(date +%s) < DEADLINE - WATCHDOG_BEFORE )); do
    sleep "${WATCHDOG_POLL:-5}" & nap=$!
    wait "$nap"
  done
  log "the deadline has come: deleting this machine"
  delete_self
}

teardown() {
  local code
  trap - EXIT INT TERM
  stop_training
  code=$(docker wait "$CONTAINER" 2>/dev/null || echo none)  # stopped by now: its exit code
  if [[ $REASON == running ]]; then
    case $code in 0) REASON=finished ;; 143|130) REASON=stopped ;; *) REASON=failed ;; esac
  fi
  mkdir -p "$OUTPUTS/logs"
  docker logs "$CONTAINER" >"$OUTPUTS/logs/train.log" 2>&1 || true
  printf '{"run": "%s", "reason": "%s", "exit_code": "%s", "seconds": %d, "ended": "%s"}\n' \
    "$RUN_ID" "$REASON" "$code" "$(($(date +%s) - STARTED))" "$(date -u +%FT%TZ)" \
    >"$OUTPUTS/status.json"
  sync_outputs || log "the last upload failed; the outputs stay in $OUTPUTS"
  docker rm --force "$CONTAINER" >/dev/null 2>&1 || true
  stop_exporters
  rm -f "$WORK/secrets.env"
  kill "$WATCHDOG" 2>/dev/null
  log "run $RUN_ID $REASON (container exit $code); outputs in $BUCKET/outputs"
  delete_self
  [[ $REASON == finished ]]
}
watchdog &
WATCHDOG=$!
trap teardown EXIT
trap 'REASON=interrupted; exit 130' INT TERM

mkdir -p "$OUTPUTS"
if [[ -n ${HOST_TOOLS:-} ]]; then
  host_tools || { log "no Docker or no $CLOUD CLI here, and installing them failed"; exit 1; }
fi
if (( GPUS > 0 )); then
  for _ in $(seq 60); do nvidia-smi >/dev/null 2>&1 && break; log "waiting for the GPU driver"; sleep 5; done
  nvidia-smi >/dev/null 2>&1 || { log "no NVIDIA driver answers"; exit 1; }
fi
# The cloud's credentials go to its own registry only (REGISTRY is empty for any other: the
# image is pulled without them). An image already here by that digest or id is not pulled again:
# --cloud=local without a registry runs the image by its id, which no registry serves.
if [[ -n $REGISTRY ]]; then
  registry_login || { log "cannot log in to $REGISTRY"; exit 1; }
fi
docker image inspect "$IMAGE" >/dev/null 2>&1 \
  || docker pull --quiet "$IMAGE" >/dev/null || { log "cannot pull $IMAGE"; exit 1; }
bucket_copy "$BUCKET/outputs" "$OUTPUTS"  # a resumed run finds its last checkpoint here
chown -R 1000:1000 "$OUTPUTS" 2>/dev/null || true  # the image's user writes there

( umask 077; : >"$WORK/secrets.env" )
for pair in $SECRETS; do
  value=$(read_secret "${pair%%=*}" "${pair#*=}") || { log "cannot read secret ${pair#*=}"; exit 1; }
  # An env file has one variable a line: a line break inside would start a variable of its own.
  if [[ $value == *$'\n'* || $value == *$'\r'* ]]; then
    log "secret ${pair#*=} holds a line break, which cannot reach the container as one variable: store it on one line (base64 for a key file)"
    exit 1
  fi
  [[ -n $value ]] && printf '%s=%s\n' "${pair%%=*}" "$value" >>"$WORK/secrets.env"
done

# Loader processes hand batches over in /dev/shm, of which Docker gives 64 MB: on CPU machines too.
gpu_flags=(--shm-size 8g)
(( GPUS > 0 )) && gpu_flags+=(--gpus all)
publish=()
if [[ -n ${MONITOR_PORT:-} ]]; then
  publish=(--publish "$METRICS_BIND:$MONITOR_PORT:$MONITOR_PORT")
  start_exporters
fi
container_args=()
eval "container_args=($CONTAINER_ARGS)"
docker run --detach --name "$CONTAINER" "${gpu_flags[@]}" "${publish[@]}" --env-file "$WORK/secrets.env" \
  --volume "$OUTPUTS:/workspace/outputs" --entrypoint dumb-init "$IMAGE" -- "${container_args[@]}" \
  >/dev/null \
  || { log "the training container did not start"; exit 1; }
REASON=running
log "training: $IMAGE ${container_args[*]}"

last_sync=$(date +%s)
running() { [[ -n $(docker ps --quiet --filter "name=^$CONTAINER\$" --filter status=running) ]]; }
while running; do
  if preempted; then
    REASON=preempted; log "preemption notice: stopping the run with a checkpoint"
    stop_training "$PREEMPT_GRACE"; break
  fi
  if (( $(date +%s) > DEADLINE - STOP_BEFORE )); then
    REASON=timeout; log "the run reached --max-hours: stopping it with a checkpoint"; stop_training; break
  fi
  if (( $(date +%s) - last_sync > SYNC_EVERY )); then
    sync_outputs || log "an upload failed; the next one retries"
    last_sync=$(date +%s)
  fi
  sleep "${POLL_SECONDS:-5}"
done
