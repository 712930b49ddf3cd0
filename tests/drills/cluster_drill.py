"""The cluster drill (issue 14): real etcd, 2 shards x 2 replicas of
vigil-server on loopback, simulated agents of 6 jobs. See docs/SCALING.md.

1. SIGKILL the leader of a shard while a P0 is being re-paged: the standby
   leads within 15 s, re-paging goes on, the receivers see no duplicate
   idempotency key and no missing round, the incident is still listed.
2. The API of every live server lists the incidents of every shard, and an
   incident of one shard is acted on through a server of the other, with
   an API token and with a browser session (vouched for with the fleet's
   peer secret).
3. Stop a whole pair: its jobs move to the other shard and are watched again,
   from the baselines the lost pair learned (copies it sent while alive).
4. A new shard joins: the jobs it wins move to it, the others stay.
5. Packet loss in three jobs of both live shards at once: one fleet-wide
   incident, on the fleet leader's pair only.
6. One node faulty in three jobs one after the other, the last two on a
   shard that does not lead the fleet: one repeat offender (lemon_node),
   on the fleet leader's pair only, shown on the node by every server's
   /api/v1/nodes.
Throughout (until 5): no incident other than the injected faults (a node moving
between shards must not look dead to the shard it left).
"""
import hashlib
import json
import re
import shutil
import time
import urllib.request

import lib
from lib import DrillError, Receivers, Server, Skip, free_port, log, server_config, wait_until

# Re-page every 6 s, long enough to span a failover.
REPAGE_POLICY = {"steps": [{"targets": ["schedule:primary"], "channels": ["pagerduty", "im"],
                            "wait_minutes": 0.1, "repeat": 40}]}
JOBS = ["alpha-r1", "bravo-r1", "charlie-r1", "delta-r1", "echo-r1", "foxtrot-r1",
        "golf-r1", "hotel-r1", "india-r1", "juliet-r1"]
OPERATOR_TOKEN = "drill-operator-token"
PEER_SECRET = "drill-peer-secret"
FAULT_KINDS = {"ecc_dbe": ("ecc_double_bit",), "loss_nan": ("loss_nan", "grad_nan")}


class Etcd:
    """An etcd cluster of `members` processes on loopback."""

    def __init__(self, env, members):
        if not shutil.which("etcd"):
            raise Skip("etcd is not installed (deploy/install-deps.sh installs etcd-server)")
        ports = [(free_port(), free_port()) for _ in range(members)]
        initial = ",".join(f"e{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(ports))
        self.endpoints = [f"http://127.0.0.1:{c}" for c, _ in ports]
        self.procs = []
        for i, (client, peer) in enumerate(ports):
            self.procs.append(env.spawn(f"etcd{i}", [
                "etcd", "--name", f"e{i}", "--data-dir", str(env.dir / f"etcd{i}"),
                "--listen-client-urls", f"http://127.0.0.1:{client}",
                "--advertise-client-urls", f"http://127.0.0.1:{client}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", initial, "--initial-cluster-state", "new",
                "--log-level", "error"]))
        ok = wait_until(lambda: all(lib.http(e + "/health", timeout=2)[0] == 200
                                    for e in self.endpoints), 30, 0.2)
        if not ok:
            raise DrillError("etcd did not start:\n" + self.procs[0].tail())


    def proposals(self):
        """etcd_server_proposals_committed_total of the first member."""
        status, body = lib.http(self.endpoints[0] + "/metrics", timeout=3)
        if status != 200 or not isinstance(body, str):
            return None
        return lib.parse_metrics(body).get("etcd_server_proposals_committed_total")


class Member(Server):
    def __init__(self, env, etcd, receivers, shard, replica):
        cfg = server_config(env, env.dir / f"data-{shard}{replica}", receivers.url)
        cfg["escalation"]["policies"] = {s: REPAGE_POLICY for s in ("P0", "P1", "P2")}
        # Baselines learned within the drill (20 steps of 1 s), so that a
        # job moving to a joining shard has some to take along.
        cfg["detection"] = {"learn_steps": 20, "learn_max_seconds": 20, "warmup_steps": 5,
                            "warmup_max_seconds": 10, "rewarm_seconds": 5}
        cfg["auth"] = {"tokens": [{"name": "alice", "role": "operator",
                                   "sha256": hashlib.sha256(OPERATOR_TOKEN.encode()).hexdigest()}]}
        secret_file = env.dir / "peer-secret"
        secret_file.write_text(PEER_SECRET + "\n")
        cfg["cluster"] = {
            "etcd_endpoints": etcd.endpoints, "prefix": "/vigil-drill",
            "shard": shard, "replica": replica, "peer_secret_file": str(secret_file),
            "advertise_grpc": cfg["grpc_listen"],
            "advertise_http": "http://" + cfg["http_listen"], "lease_seconds": 5,
            # Copies of the learned profiles go to each job's successor
            # shard every 5 s (60 s by default) so phase 3 finds them.
            "profile_backup_seconds": 5}
        super().__init__(env, cfg, name=f"server-{shard}{replica}")
        self.shard, self.replica = shard, replica

    def cluster(self):
        status, body = self.get("/api/v1/cluster", timeout=3)
        return body if status == 200 and isinstance(body, dict) else {}

    def local_incidents(self):
        return self.api("/api/v1/incidents?state=all&limit=10000&local=1")["incidents"]

    def local_jobs(self):
        status, body = self.get("/api/v1/jobs?local=1", timeout=5)
        if status != 200 or not isinstance(body, dict):
            return {}
        return {j.get("job"): j for j in body.get("jobs", [])}


def session_on(server):
    """Signs in to `server`'s web UI with the operator token: (Cookie header,
    CSRF token), or (None, why not)."""
    req = urllib.request.Request(f"{server.base}/api/v1/session", method="POST",
                                 data=json.dumps({"token": OPERATOR_TOKEN}).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.headers.get("Set-Cookie", "").split(";")[0], json.loads(r.read()).get("csrf")
    except (OSError, ValueError) as e:
        return None, str(e)


def owner_of(server, job):
    status, body = server.get(f"/api/v1/cluster?job={job}", timeout=3)
    if status != 200 or not isinstance(body, dict) or "owner" not in body:
        raise DrillError(f"/api/v1/cluster?job={job}: {status} {str(body)[:200]}")
    return body["owner"]["shard"]


def receipts_of(receivers, service):
    return [r for r in receivers.receipts() if r.get("service") == service and r.get("ok")]


def page_rounds(keys):
    """{(incident, channel, user): sorted rounds} from stable page keys
    '<incident>/<round>/<channel>[/<user>][@receiver]'."""
    out = {}
    for key in keys:
        base = key.split("@")[0]
        m = re.match(r"^(.*)/(\d+)/([a-z_]+)(?:/([^/]+))?$", base)
        if not m:
            continue
        out.setdefault((m.group(1), m.group(3), m.group(4)), []).append(int(m.group(2)))
    return {k: sorted(v) for k, v in out.items()}


def drill_cluster(env, res, short, seed):
    res.injected = ("SIGKILL of a shard leader while it re-pages a P0; a whole pair stopped; "
                    "a new shard joining; packet loss in three jobs at once; one node faulty in "
                    "three jobs one after the other")
    etcd = Etcd(env, 1 if short else 3)
    receivers = Receivers(env)
    receivers.start()
    servers = {}
    for shard in ("s0", "s1"):
        for replica in ("a", "b"):
            m = Member(env, etcd, receivers, shard, replica)
            m.start()
            servers[m.name] = m
    live = lambda: [s for s in servers.values() if s.proc and s.proc.alive()]  # noqa: E731

    def leaders(shard):
        return [s for s in live() if s.shard == shard and s.cluster().get("shard_leader")]

    ok = wait_until(lambda: all(len(s.cluster().get("members", [])) == 4 for s in live())
                    and all(len(leaders(sh)) == 1 for sh in ("s0", "s1")), 30, 0.5)
    if not ok:
        raise DrillError("the cluster did not form: " + json.dumps(
            {s.name: s.cluster() for s in live()})[:600])
    res.load = f"etcd x{len(etcd.endpoints)}, 2 shards x 2 replicas"

    # Six jobs over both shards, a P0 fault in one job of each shard.
    any_server = servers["server-s0a"]
    owners = {job: owner_of(any_server, job) for job in JOBS}
    by_shard = {sh: [j for j in JOBS if owners[j] == sh] for sh in ("s0", "s1")}
    if len(by_shard["s0"]) < 2 or len(by_shard["s1"]) < 2:
        raise DrillError(f"job names do not spread over both shards: {owners}")
    jobs = by_shard["s0"][:3] + by_shard["s1"][:3]
    faults = {by_shard["s0"][0]: "ecc_dbe", by_shard["s1"][0]: "loss_nan"}
    seeds = ",".join(s.grpc for s in servers.values())
    agents = []
    for i, job in enumerate(jobs):
        scenario = faults.get(job, "healthy")
        agents.append(lib.Agent(env, seeds, f"n{i}", job, scenario=scenario,
                                fault_node=f"n{i}" if job in faults else None,
                                fault_at=12 if job in faults else None, seed=seed + i))
    res.load += f", {len(agents)} simulated 8-GPU nodes of {len(jobs)} jobs: " + ", ".join(
        f"{j} ({owners[j]}{', ' + faults[j] if j in faults else ''})" for j in jobs)

    # 1. The P0 of the s0 job is re-paged; kill s0's leader in the middle.
    p0_job = by_shard["s0"][0]
    p0_kinds = FAULT_KINDS[faults[p0_job]]

    def p0_incident(server):
        for inc in server.local_incidents():
            if inc.get("job") == p0_job and inc.get("kind") in p0_kinds:
                return inc
        return None

    writes0, t_writes0 = etcd.proposals(), time.time()
    if not wait_until(lambda: p0_incident(leaders("s0")[0]) is not None, 60, 1):
        raise DrillError(f"no P0 for {p0_job} on s0's leader")
    pd_keys = lambda: [r.get("idempotency_key", "") for r in receipts_of(receivers, "pagerduty")]  # noqa: E731
    if not wait_until(lambda: max((len(v) for v in page_rounds(pd_keys()).values()), default=0)
                      >= 2, 40, 0.5):
        raise DrillError(f"the P0 was not re-paged: {pd_keys()}")
    writes1, t_writes1 = etcd.proposals(), time.time()
    if writes0 is not None and writes1 is not None:
        res.fact("etcd raft writes/s, 4 servers steady with a P0 re-paged (proposals committed)",
                 f"{(writes1 - writes0) / (t_writes1 - t_writes0):.2f} over "
                 f"{t_writes1 - t_writes0:.0f} s")
    leader = leaders("s0")[0]
    standby = next(s for s in live() if s.shard == "s0" and s is not leader)
    rounds_before = max(len(v) for v in page_rounds(pd_keys()).values())
    leader.sigkill()
    t_kill = time.time()
    took_over = wait_until(lambda: standby.cluster().get("shard_leader"), 30, 0.2)
    failover = time.time() - t_kill
    res.check("the standby leads within 15 s of the leader's SIGKILL", took_over and failover <= 15,
              f"{failover:.1f} s")
    res.fact("failover: SIGKILL to the standby leading (s)", f"{failover:.1f}")
    wait_until(lambda: max(len(v) for v in page_rounds(pd_keys()).values()) >= rounds_before + 3,
               45, 0.5)
    keys = pd_keys()
    dups = sorted({k for k in keys if keys.count(k) > 1})
    rounds = page_rounds(keys)
    gaps = {f"{k[0]} {k[1]}": v for k, v in rounds.items() if v != list(range(1, len(v) + 1))}
    res.check("re-paging continued after the failover",
              max(len(v) for v in rounds.values()) >= rounds_before + 3,
              f"{rounds_before} rounds before the kill, {max(len(v) for v in rounds.values())} "
              "after")
    res.check("receivers saw no duplicate idempotency key", not dups, f"{len(keys)} pages; "
              f"duplicates: {dups[:5]}")
    res.check("receivers saw no missing round", not gaps, json.dumps(gaps)[:300] or "rounds 1..n")
    res.check("the standby still has the P0", p0_incident(standby) is not None, "")

    # The killed server comes back as the standby; an acknowledgement made
    # through it stops the new leader's re-pages (shared through etcd).
    leader.start()
    if not wait_until(lambda: p0_incident(leader) is not None
                      and leader.cluster().get("shard_leader_replica") == standby.replica, 30, 0.5):
        raise DrillError("the restarted server did not rejoin as standby with the P0")
    ack_id = p0_incident(leader)["id"]
    status, body = lib.http(f"{leader.base}/api/v1/incidents/{ack_id}/ack", method="POST",
                            body={"comment": "drill: on it"},
                            headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
    if status != 200:
        raise DrillError(f"ack through the standby: {status} {body}")
    t_ack = time.time()
    acked = wait_until(lambda: (p0_incident(standby) or {}).get("lifecycle") == "acknowledged",
                       10, 0.2)
    res.check("an ack made through the standby reaches the leader", acked,
              f"after {time.time() - t_ack:.1f} s")
    # PagerDuty hears of the ack ("acknowledge"); no more "trigger" after it.
    triggers = lambda: [r for r in receipts_of(receivers, "pagerduty")  # noqa: E731
                        if r.get("fields", {}).get("event_action") == "trigger"
                        and r.get("idempotency_key", "").startswith(f"{p0_job}:")]
    time.sleep(3)  # a page already on its way may still land
    at_ack = len(triggers())
    time.sleep(15)  # two and a half re-page periods
    res.check("no re-page after the ack", len(triggers()) == at_ack,
              f"{at_ack} triggers at the ack, {len(triggers())} 18 s later")
    dedup = {r["fields"].get("dedup_key") for r in receipts_of(receivers, "pagerduty")
             if r.get("idempotency_key", "").startswith(f"{p0_job}:")}
    res.check("PagerDuty sees one incident whichever member paged", len(dedup) == 1,
              f"dedup keys: {sorted(dedup)}")

    # 2. One view: every live server lists both shards' incidents.
    for s in live():
        status, body = s.get("/api/v1/incidents?state=all&limit=10000")
        got = {i.get("job") for i in (body or {}).get("incidents", [])} if status == 200 else set()
        res.check(f"{s.name}'s API lists every shard's incidents",
                  set(faults) <= got, f"jobs with incidents: {sorted(got)}; shards "
                  f"{(body or {}).get('shards') if isinstance(body, dict) else body}")

    # ...and acts on them: an s1 incident read and acknowledged through an
    # s0 server goes on to s1 (its id names the shard).
    s1_job = by_shard["s1"][0]
    s1_leader = leaders("s1")[0]
    s1_inc = next((i for i in s1_leader.local_incidents() if i.get("job") == s1_job
                   and i.get("kind") in FAULT_KINDS[faults[s1_job]]), None)
    via = next(s for s in live() if s.shard == "s0")
    if s1_inc is None:
        res.check("another shard's incident is read and acknowledged through any server", False,
                  f"no incident of {s1_job} on {s1_leader.name}")
    else:
        status, detail = via.get(f"/api/v1/incidents/{s1_inc['id']}")
        ack_status, ack_body = lib.http(
            f"{via.base}/api/v1/incidents/{s1_inc['id']}/ack", method="POST",
            body={"comment": "drill: acked through the other shard"},
            headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
        acked = wait_until(lambda: next((i for i in s1_leader.local_incidents()
                                         if i.get("id") == s1_inc["id"]), {}).get("lifecycle")
                           == "acknowledged", 10, 0.2)
        res.check("another shard's incident is read and acknowledged through any server",
                  status == 200 and (detail or {}).get("id") == s1_inc["id"]
                  and ack_status == 200 and acked,
                  f"GET {status}, ack {ack_status} via {via.name}; "
                  f"{s1_leader.name} {'acknowledged' if acked else str(ack_body)[:200]}")
        # A browser session is known only where it signed in: the s0 server
        # vouches for its user to s1 (cluster.peer_secret_file).
        cookie, csrf = session_on(via)
        steps = []
        for verb in ("unack", "ack"):
            st, _ = lib.http(f"{via.base}/api/v1/incidents/{s1_inc['id']}/{verb}", method="POST",
                             body={"comment": "drill: a browser session on the other shard"},
                             headers={"Cookie": cookie or "", "X-CSRF-Token": csrf or ""})
            steps.append(f"{verb} {st}")
        vouched = f"alice (via {via.shard}/{via.replica})"
        audited = wait_until(lambda: [e for e in s1_leader.api("/api/v1/audit?limit=50")
                                      .get("entries", []) if e.get("who") == vouched], 10, 0.2)
        res.check("a browser session signed in on an s0 server acts on an s1 incident",
                  cookie is not None and steps == ["unack 200", "ack 200"] and len(audited) >= 2,
                  f"{', '.join(steps) or csrf} via {via.name}; {s1_leader.name} audited "
                  f"{len(audited)} operations by '{vouched}'")
        # The session itself is shared through etcd: a server of the other
        # shard takes its cookie (a load balancer may send the browser's
        # next request there, or its server may die).

        def whoami(server):
            st, body = lib.http(f"{server.base}/api/v1/session",
                                headers={"Cookie": cookie or ""})
            return body if st == 200 and isinstance(body, dict) else {}
        t_shared = time.time()
        shared = wait_until(lambda: whoami(s1_leader).get("via") == "session", 10, 0.2)
        me = whoami(s1_leader)
        res.check("a browser session signed in on an s0 server holds on an s1 server",
                  cookie is not None and shared and me.get("name") == "alice"
                  and me.get("csrf") == csrf,
                  f"{s1_leader.name}: {me} after {time.time() - t_shared:.1f} s")

    # 3. Stop the whole s1 pair: its jobs move to s0 and are watched again.
    s1_jobs = [j for j in jobs if owners[j] == "s1"]
    t_stop = time.time()
    for s in [s for s in live() if s.shard == "s1"]:
        s.proc.stop()

    def baseline_sources(server, moved_jobs):
        """How many of the moved jobs' gpu_power_watts series on `server`
        have each baseline source, once past their re-warm there."""
        def baselines():
            out = []
            for job in moved_jobs:
                node = next(a.node for a in agents if a.job == job)
                for series in server.api(
                        f"/api/v1/series?metric=gpu_power_watts&node={node}")["series"]:
                    out.append(server.api(f"/api/v1/baseline?series={series['id']}"))
            return out
        # Past the node's re-warm on its new shard, its series take samples.
        wait_until(lambda: all(b.get("evaluated", 0) > 0 for b in baselines()), 30, 1)
        sources = {}
        for b in baselines():
            sources[b.get("source")] = sources.get(b.get("source"), 0) + 1
        return sources

    def watched_on(server, job, since):
        j = server.local_jobs().get(job)
        return j is not None and j.get("last_frame_ts", 0) >= since

    moved = wait_until(lambda: all(watched_on(standby, j, t_stop + 1) for j in s1_jobs), 90, 1)
    res.check("a stopped pair's jobs are watched by the other shard", moved,
              f"{len(s1_jobs)} jobs; after {time.time() - t_stop:.0f} s")
    res.fact("whole pair stopped: its jobs watched again after (s)", f"{time.time() - t_stop:.0f}")
    # ...starting from the baselines s1 learned: its leader sent copies of
    # their profiles to s0, the shard they move to without s1.
    lost_sources = baseline_sources(standby, s1_jobs)
    res.check("they start from the baselines the lost pair learned (copies it sent)",
              lost_sources.get("inherited", 0) + lost_sources.get("learned", 0) > 0
              and lost_sources.get("learning", 0) == 0,
              f"{s1_jobs}: baseline source of their gpu_power_watts series on s0: {lost_sources}")

    # 4. A new shard joins: the jobs it wins move to it.
    newcomer = Member(env, etcd, receivers, "s2", "a")
    newcomer.start()
    servers[newcomer.name] = newcomer
    if not wait_until(lambda: "s2" in [s["shard"] for s in standby.cluster().get("shards", [])],
                      20, 0.5):
        raise DrillError(f"s2 did not join: {standby.cluster()}")
    t_join = time.time()
    wins = [j for j in jobs if owner_of(standby, j) == "s2"]
    stays = [j for j in jobs if j not in wins]
    if wins:
        moved = wait_until(lambda: all(watched_on(newcomer, j, t_join + 1) for j in wins), 60, 1)
        res.check("the jobs a joining shard wins move to it", moved,
                  f"{wins} after {time.time() - t_join:.0f} s")
        # The jobs s0 ran from the start had learned baselines there; those
        # that came from the stopped pair had not had time to on s0.
        carried = [j for j in wins if owners[j] == "s0"]
        sources = baseline_sources(newcomer, carried)
        if carried:
            res.check("they keep their baselines (their series start from the old shard's)",
                      sources.get("inherited", 0) + sources.get("learned", 0) > 0
                      and sources.get("learning", 0) == 0,
                      f"{carried}: baseline source of their gpu_power_watts series on s2: "
                      f"{sources}")
    stayed = wait_until(lambda: all(watched_on(standby, j, t_join + 5) for j in stays), 20, 1)
    res.check("the other jobs stay", stayed, f"{stays}")

    # No false incident anywhere: only the injected faults' kinds.
    time.sleep(5)
    allowed = {k for kinds in FAULT_KINDS.values() for k in kinds}
    stray = []
    for s in live():
        for inc in s.local_incidents():
            if inc.get("kind") not in allowed:
                stray.append(f"{s.name}: {inc.get('kind')} {inc.get('job')} {inc.get('node')}")
    res.check("no incident besides the injected faults", not stray, "; ".join(stray[:6]))

    # 5. Packet loss in three jobs at once, on both live shards: one
    # fleet-wide incident, opened by the fleet leader's pair only.
    by_owner = {}
    for i in range(60):
        job = f"kilo{i}-r1"
        by_owner.setdefault(owner_of(standby, job), []).append(job)
    live_shards = sorted(by_owner)
    picked = by_owner[live_shards[0]][:2] + by_owner[live_shards[-1]][:1]
    seeds_live = ",".join(s.grpc for s in live())
    t_loss = time.time()
    loss_agents = [lib.Agent(env, seeds_live, f"n{20 + i}", job, scenario="packet_loss_hang",
                             fault_node=f"n{20 + i}", fault_at=10, seed=seed + 20 + i)
                   for i, job in enumerate(picked)]

    def fleet_incidents():
        return [(s, inc) for s in live() for inc in s.local_incidents()
                if inc.get("kind") == "fleet_wide_fault"]
    wait_until(lambda: fleet_incidents(), 90, 1)
    time.sleep(3)  # a second one would show by now
    found = fleet_incidents()
    fleet_shard = standby.cluster().get("fleet_leader_shard", "")
    holders = sorted({s.shard for s, _ in found})
    summary = found[0][1].get("summary", "") if found else ""
    res.check("packet loss in 3 jobs on 2 shards is one fleet-wide incident, "
              "opened by the fleet leader's pair",
              bool(found) and holders == [fleet_shard] and all(j in summary for j in picked),
              f"jobs {picked} on {[owner_of(standby, j) for j in picked]}; fleet leader's "
              f"shard {fleet_shard!r}; fleet_wide_fault on "
              f"{[(s.name, i.get('id')) for s, i in found]}: {summary[:240]}")
    if found:
        res.fact("fleet-wide fault opened after the jobs started (s)",
                 f"{min(i.get('ts', 0) for _, i in found) - t_loss:.0f}")
    for a in loss_agents:
        a.stop()

    # 6. One node, an ECC double-bit fault in each of three jobs one after
    # the other: the first on the fleet leader's shard, the two that
    # complete it on another. One lemon, raised by the fleet leader's pair.
    other = [sh for sh in live_shards if sh != fleet_shard]
    lemon_jobs = []
    if other:
        by_owner = {}
        for i in range(80):
            job = f"lima{i}-r1"
            by_owner.setdefault(owner_of(standby, job), []).append(job)
        lemon_jobs = by_owner.get(fleet_shard, [])[:1] + by_owner.get(other[0], [])[:2]
    if len(lemon_jobs) == 3:
        t_lemon = time.time()
        agent = None
        for i, job in enumerate(lemon_jobs):
            if agent is not None:
                agent.stop()
            agent = lib.Agent(env, seeds_live, "n30", job, scenario="ecc_dbe", fault_node="n30",
                              fault_at=4, seed=seed + 30 + i)
            wait_until(lambda: any(inc.get("job") == job and inc.get("node") == "n30"
                                   for s in live() for inc in s.local_incidents()), 60, 1)

        def lemons():
            return [(s, inc) for s in live() for inc in s.local_incidents()
                    if inc.get("kind") == "lemon_node" and inc.get("node") == "n30"]
        wait_until(lambda: lemons(), 60, 1)
        time.sleep(3)  # a second one would show by now
        found = lemons()
        holders = sorted({s.shard for s, _ in found})
        res.check("a node faulty in 3 jobs (2 of them on another shard) is one lemon, "
                  "opened by the fleet leader's pair",
                  bool(found) and holders == [fleet_shard],
                  f"jobs {lemon_jobs} on {[owner_of(standby, j) for j in lemon_jobs]}; fleet "
                  f"leader's shard {fleet_shard!r}; lemon_node on "
                  f"{[(s.name, i.get('id')) for s, i in found]}")
        if found:
            res.fact("lemon opened after the first job started (s)",
                     f"{min(i.get('ts', 0) for _, i in found) - t_lemon:.0f}")

        def lemon_on_nodes(server):
            status, body = server.get("/api/v1/nodes", timeout=5)
            if status != 200 or not isinstance(body, dict):
                return None
            return next((n.get("lemon") for n in body.get("nodes", []) if n.get("node") == "n30"),
                        None)
        shown = {s.name: bool(lemon_on_nodes(s)) for s in live()}
        res.check("every server's /api/v1/nodes shows the node's lemon", all(shown.values()),
                  f"{shown}")
        agent.stop()
    else:
        res.check("jobs found for the lemon phase", False,
                  f"live shards {live_shards}, fleet leader's {fleet_shard!r}")
    res.times = ("1 SIGKILL (and restart), 1 ack through the standby, 1 ack through the other "
                 "shard, 1 pair stopped, 1 shard joined, packet loss in 3 jobs at once, "
                 "one node faulty in 3 jobs")
    for a in agents:
        a.stop()
