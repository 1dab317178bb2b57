#!/usr/bin/env bash
# A job that really spans hosts: two network namespaces on this machine
# joined by a veth pair stand for two hosts; mpirun runs in the first with a hostfile naming both
# addresses and a launch agent that enters the namespace of the address (where ssh would log in);
# MPI talks over its TCP transport only (no shared memory). A 2-rank FSDP job across them must
# give the same losses as on one host, and each rank must have run in its own namespace.
# Needs root (ip netns) and iproute2.
set -u
cd "$(dirname "$0")/.."
bin=${CT_BIN:-${BUILD:-build}/ctitan}
[ -x "$bin" ] || { echo "FAIL two_hosts: $bin not built (make)"; exit 1; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
tmp=$(mktemp -d)
h1=ct_h1_$$ h2=ct_h2_$$
cleanup() { ip netns del "$h1" 2>/dev/null; ip netns del "$h2" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
if ! { ip netns add "$h1" && ip netns add "$h2" && ip link add "v1_$$" type veth peer name "v2_$$" &&
       ip link set "v1_$$" netns "$h1" && ip link set "v2_$$" netns "$h2" &&
       ip -n "$h1" addr add 10.77.0.1/24 dev "v1_$$" && ip -n "$h2" addr add 10.77.0.2/24 dev "v2_$$" &&
       ip -n "$h1" link set "v1_$$" up && ip -n "$h2" link set "v2_$$" up &&
       ip -n "$h1" link set lo up && ip -n "$h2" link set lo up; } 2>"$tmp/netns.err"; then
  echo "FAIL two_hosts: cannot make two network namespaces here (needs root): $(head -1 "$tmp/netns.err")"
  exit 1
fi
# The launch agent: `agent HOST COMMAND...`, as mpirun calls ssh.
cat >"$tmp/agent" <<AGENT
#!/usr/bin/env bash
host=\$1; shift
case \$host in 10.77.0.1) ns=$h1 ;; 10.77.0.2) ns=$h2 ;; *) echo "agent: unknown host \$host" >&2; exit 1 ;; esac
echo "\$host" >>"$tmp/agent.log"
exec ip netns exec "\$ns" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 sh -c "\$*"
AGENT
# Each rank notes its network namespace before it becomes ctitan.
cat >"$tmp/rank" <<RANK
#!/usr/bin/env bash
echo "\$OMPI_COMM_WORLD_RANK \$(readlink /proc/self/ns/net)" >>"$tmp/namespaces"
exec "$bin" "\$@"
RANK
chmod +x "$tmp/agent" "$tmp/rank"
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' >"$tmp/hosts"
asroot=""; [ "$(id -u)" -eq 0 ] && asroot="--allow-run-as-root"
job=(train --model.dim 64 --model.n_layers 2 --model.n_heads 4 --model.n_kv_heads 2 --model.vocab_size 128
     --model.ffn_hidden_dim 96 --training.seq_len 32 --training.dataset synthetic --metrics.peak_tflops 1
     --metrics.log_freq 1 --training.steps 5 --parallelism.data_shard_degree 2)
export OMP_NUM_THREADS=1
timeout 120 ip netns exec "$h1" mpirun $asroot --hostfile "$tmp/hosts" -np 2 --mca plm_rsh_agent "$tmp/agent" \
  --mca plm_rsh_no_tree_spawn 1 --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 \
  --mca oob_tcp_if_include 10.77.0.0/24 "$tmp/rank" "${job[@]}" --job.dump_folder "$tmp/two" >"$tmp/two.log" 2>&1
rc=$?
timeout 120 mpirun $asroot --oversubscribe --bind-to none -np 2 "$bin" "${job[@]}" --job.dump_folder "$tmp/one" \
  >"$tmp/one.log" 2>&1
losses() { grep -o '"step": [0-9]*, "loss": [^,]*, "grad_norm": [^,]*' "$1/metrics.jsonl" 2>/dev/null; }
ns_count=$(cut -d' ' -f2 "$tmp/namespaces" 2>/dev/null | sort -u | wc -l)
if [ $rc -ne 0 ]; then
  echo "FAIL two_hosts_fsdp_job: exit $rc: $(grep -v '^step' "$tmp/two.log" | tail -3 | tr '\n' ' ')"
elif ! grep -q 10.77.0.2 "$tmp/agent.log" 2>/dev/null || [ "$ns_count" != 2 ]; then
  echo "FAIL two_hosts_fsdp_job: the ranks did not run in two namespaces ($ns_count)"
elif [ -z "$(losses "$tmp/two")" ] || [ "$(losses "$tmp/two")" != "$(losses "$tmp/one")" ]; then
  echo "FAIL two_hosts_fsdp_job: losses differ from one host"
else
  echo "PASS two_hosts_fsdp_job_matches_one_host"
fi
