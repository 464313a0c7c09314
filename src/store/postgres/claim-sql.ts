/**
 * Migration 6: limits and fairness in PostgreSQL's claim (`complete_and_claim`), with the rules
 * of core/claim-plan.ts: priority aging, fairness between tenants, the per-type rate limit, the
 * per-key concurrency limit, and tenant running caps.
 *
 * How a claim runs, per type (the types come sorted, so advisory locks are always taken in one
 * order: types, then tenants):
 * - A type with a concurrency, key or rate limit takes the type's advisory lock: its claims are
 *   serialised across workers, so the counts they read are exact.
 * - The rate limit is a sliding-window log (`rate_starts`): starts older than the window are
 *   deleted, the rest counted; when the window is full, the claim reports when it frees.
 * - Candidates are read per tenant (a skip scan finds the tenants with queued jobs, at most 64,
 *   from a random point when there are more) and per priority level, locked (FOR UPDATE SKIP
 *   LOCKED) as they are read. A type with a concurrency key reads them per key instead.
 * - The plan is one statement with window functions, the same steps as `planClaim`.
 * The common claim (one type, no limits, one tenant, one priority level, no tenant cap) skips
 * all that: two index probes (the first queued (tenant, priority), and whether another pair
 * follows it), then one ordered scan, as before.
 */
import { claimNow, rateRoom } from './claim-rate-sql.js';
import { selfCounted, claimCountedCte, progressProbe } from './self-count-sql.js';
import { claimedRows, returns } from './claim-rows-sql.js';
import { logAppendFixed } from './log-sql.js';

/** A queued job a claim may take (what `planClaim` calls a ClaimCandidate). */
const CANDIDATE_TYPE = `CREATE TYPE {s}.claim_candidate AS (id uuid, type text, tenant text, rank smallint, run_at bigint, ckey text)`;

/** How many candidates per tenant or key (core/claim-plan.ts perGroupFetch). */
const PER_GROUP_FETCH = `
  CREATE FUNCTION {s}.per_group_fetch(p_room integer, p_groups integer) RETURNS integer
  LANGUAGE sql IMMUTABLE AS $fn$
    SELECT CASE WHEN p_groups <= 1 THEN p_room ELSE least(p_room, greatest(8, ceil(2.0 * p_room / p_groups)::integer)) END
  $fn$;`;

/**
 * The tenants (p_keys false) or concurrency keys (true) with queued jobs of a type: a skip scan,
 * one index probe each, at most 64; past 64, a new scan from a random point, wrapping around.
 */
const GROUPS = `
  CREATE FUNCTION {s}.claim_groups(p_type text, p_keys boolean) RETURNS text[]
  LANGUAGE plpgsql AS $fn$
  DECLARE
    v_out text[] := '{}';
    v_at text := '';
    v_next text;
    v_start text := NULL;
    v_wrapped boolean := false;
  BEGIN
    LOOP
      IF p_keys THEN
        SELECT j.ckey INTO v_next FROM {s}.jobs j
        WHERE j.state = 'queued' AND j.ckey IS NOT NULL AND j.type = p_type AND j.ckey > v_at ORDER BY j.ckey LIMIT 1;
      ELSE
        SELECT j.tenant INTO v_next FROM {s}.jobs j
        WHERE j.state = 'queued' AND j.type = p_type AND j.tenant > v_at ORDER BY j.tenant LIMIT 1;
      END IF;
      IF v_next IS NULL OR (v_wrapped AND v_next COLLATE "C" > v_start COLLATE "C") THEN
        EXIT WHEN v_start IS NULL OR v_wrapped;
        v_wrapped := true;
        v_at := '';
        CONTINUE;
      END IF;
      v_out := v_out || v_next;
      v_at := v_next;
      IF cardinality(v_out) >= 64 THEN
        EXIT WHEN v_start IS NOT NULL;
        -- 64 and more: take 64 from a random point instead, so that every one gets its turn.
        v_start := md5(random()::text);
        v_at := v_start;
        v_out := '{}';
      END IF;
    END LOOP;
    RETURN v_out;
  END
  $fn$;`;

/**
 * The candidates of type `p_types[t]`: per tenant of `v_groups` (the first one alone, or a skip
 * scan) and per priority level, `v_fetch` each, locked as they are read (planClaim's input).
 */
function tenantCandidates(t: 'v_i' | 'v_t'): string {
  return `      v_groups := CASE WHEN v_alone THEN ARRAY[v_group] ELSE {s}.claim_groups(p_types[${t}], false) END;
      v_fetch := {s}.per_group_fetch(v_room, cardinality(v_groups));
      FOREACH v_group IN ARRAY v_groups LOOP
        FOR v_level IN 0 .. 3 LOOP
          v_cands := v_cands || ARRAY(
            SELECT ROW(j.id, j.type, j.tenant, j.priority, j.run_at, j.ckey)::{s}.claim_candidate FROM {s}.jobs j
            WHERE j.state = 'queued' AND j.type = p_types[${t}] AND j.tenant = v_group AND j.priority = v_level
            ORDER BY j.run_at, j.id
            LIMIT v_fetch
            FOR UPDATE SKIP LOCKED);
        END LOOP;
      END LOOP;
`;
}

const V6_HEADS = `      -- The first (tenant, priority) queued, and whether any other follows it: two probes.
      SELECT j.tenant, j.priority INTO v_group, v_rank FROM {s}.jobs j
      WHERE j.state = 'queued' AND j.type = p_types[v_i] ORDER BY j.tenant, j.priority LIMIT 1;
      CONTINUE WHEN NOT FOUND;
      -- (ORDER BY keeps the plan on the index: with a bare filter a generic plan may scan the table.)
      PERFORM FROM {s}.jobs j WHERE j.state = 'queued' AND j.type = p_types[v_i] AND (j.tenant, j.priority) > (v_group, v_rank)
      ORDER BY j.tenant, j.priority LIMIT 1;
      v_alone := NOT FOUND;
      v_cap := CASE WHEN v_group = ANY(coalesce(p_cap_tenants, '{}')) THEN p_caps[array_position(p_cap_tenants, v_group)] ELSE p_cap_others END;
      IF v_alone AND v_types = 1 AND p_rate_max[v_i] IS NULL AND v_cap IS NULL THEN
        -- One tenant, one priority level: the queue index order is the plan.
        v_ids := ARRAY(
          SELECT j.id FROM {s}.jobs j
          WHERE j.state = 'queued' AND j.type = p_types[v_i] AND j.tenant = v_group
          ORDER BY j.priority, j.run_at, j.id
          LIMIT v_room
          FOR UPDATE SKIP LOCKED);
        EXIT types;
      END IF;
${tenantCandidates('v_i')}    END LOOP;
`;

/**
 * The claim's first pass records each type's first queued (tenant, priority); the second decides
 * per type: the fast path (one type with queued jobs, one pair), or candidates per tenant and
 * level. Migration 10 claims the fast path's jobs by id; migration 12 in one statement planned
 * for the call (fastClaim), and reads candidates without sorts or JIT.
 */
function headsPasses(version: 10 | 12): string {
  const fastPath =
    version === 10
      ? `        v_ids := ARRAY(
          SELECT j.id FROM {s}.jobs j
          WHERE j.state = 'queued' AND j.type = p_types[v_t] AND j.tenant = v_group
          ORDER BY j.priority, j.run_at, j.id
          LIMIT v_room
          FOR UPDATE SKIP LOCKED);
        EXIT heads;`
      : `        -- (claimed below, by one statement planned for this call)
        v_fast := true;
        EXIT heads;`;
  // (The SQL names fastClaim by its former name, FAST_CLAIM: a released migration's text never changes.)
  const guardOn = version === 10 ? '' : `    -- Without sorts and JIT while reading candidates (see FAST_CLAIM): each read is one tenant's
    -- queue, in index order.
    v_sort := current_setting('enable_sort');
    v_jit := current_setting('jit');
    PERFORM set_config('enable_sort', 'off', true), set_config('jit', 'off', true);
`;
  const guardOff = version === 10 ? '' : `    PERFORM set_config('enable_sort', v_sort, true), set_config('jit', v_jit, true);
`;
  return `      -- The first (tenant, priority) queued: kept for the second pass.
      SELECT j.tenant, j.priority INTO v_group, v_rank FROM {s}.jobs j
      WHERE j.state = 'queued' AND j.type = p_types[v_i] ORDER BY j.tenant, j.priority LIMIT 1;
      CONTINUE WHEN NOT FOUND;
      v_heads := v_heads || v_i;
      v_head_groups := v_head_groups || v_group;
      v_head_ranks := v_head_ranks || v_rank;
      v_head_rooms := v_head_rooms || v_room;
    END LOOP;
    -- Second pass, over the types with queued jobs: whether another (tenant, priority) follows
    -- the first; one type alone with one pair (and no keyed candidates) is the fast path.
${guardOn}    <<heads>>
    FOR v_h IN 1 .. cardinality(v_heads) LOOP
      v_t := v_heads[v_h];
      v_group := v_head_groups[v_h];
      v_rank := v_head_ranks[v_h];
      v_room := v_head_rooms[v_h];
      -- (ORDER BY keeps the plan on the index: with a bare filter a generic plan may scan the table.)
      PERFORM FROM {s}.jobs j WHERE j.state = 'queued' AND j.type = p_types[v_t] AND (j.tenant, j.priority) > (v_group, v_rank)
      ORDER BY j.tenant, j.priority LIMIT 1;
      v_alone := NOT FOUND;
      v_cap := CASE WHEN v_group = ANY(coalesce(p_cap_tenants, '{}')) THEN p_caps[array_position(p_cap_tenants, v_group)] ELSE p_cap_others END;
      IF v_alone AND cardinality(v_heads) = 1 AND cardinality(v_cands) = 0 AND p_rate_max[v_t] IS NULL AND v_cap IS NULL THEN
        -- One tenant, one priority level: the queue index order is the plan.
${fastPath}
      END IF;
${tenantCandidates('v_t')}    END LOOP;
${guardOff}`;
}


/**
 * The claim's SET: the job runs under a new lease (`worker` and `now`: $2 and $3 in a statement run
 * by EXECUTE, the function's arguments in a static one). From version 16 its log entry waits in the
 * row (`claim_logged` false, log-sql.ts pendingClaim).
 */
const claimSet = (version: number, worker = '$2', now = '$3') => `        SET state = 'running',
            lease = j.lease + 1,
            attempts = j.attempts + 1,
            worker_id = ${worker},
            started_at = ${now},
            heartbeat_at = ${now},
            stalled = false,
            ${version >= 16 ? 'claim_logged = false' : `log = ${logAppendFixed('queued', 'running', now, 'claimed', 'j.attempts + 1', worker)}`},
            updated_at = greatest(${now}, j.updated_at + 1, coalesce(${progressProbe(version, 'j', 'updated_at', 'j.lease')}, 0) + 1)
`;

/**
 * Migration 12: the fast path's select and claim in one statement, planned for each call and
 * without sorts. Planned once per connection (the function's generic plans) while the table was
 * small or not yet analyzed, the select read the tenant's whole backlog through
 * jobs_tenant_backlog and sorted it: 20-60 ms per claim at 40,000 queued jobs. Now it reads the
 * queue index in order and stops at the limit.
 *
 * Migration 17: the same statement, static again, so it is planned once per session: parsing and
 * planning it cost every call about 0.27 ms (0.83 against 0.55 ms for a claim of 10 jobs, which is
 * half a millisecond per 1,000 jobs at 500 per cycle). Sorts are off when that plan is made (set just
 * before the statement), so the queue index is the only order it can use: planned on a table of
 * 1,000 jobs, then used at 61,000 and 121,000, it claimed 500 jobs in the same 5.3-5.7 ms as the
 * statement planned for each call.
 */
const fastClaim = (version: number) => {
  // Version 17: a static statement, planned once per session (the function's generic plans) under
  // the settings set just before it; versions 12-16 planned it at every call (EXECUTE).
  const cached = version >= 17;
  // Version 20: the statement appends its own change to job_changes (self-count-sql.ts).
  const counts = version >= 20;
  const [type, worker, now, tenant, room] = cached ? ['p_types[v_t]', 'p_worker', 'p_now', 'v_group', 'v_room'] : ['$1', '$2', '$3', '$4', '$5'];
  return `    IF v_fast THEN
      -- Without sorts: the queue index gives the order. Row estimates are often wrong here (a
      -- burst not yet analyzed), and one of 1 row made the planner read the tenant's backlog
      -- through jobs_tenant_backlog and sort it, even planned for the call. And without JIT: the
      -- cost the planner gives a plan it may not sort would pass jit_above_cost (0.5 s to compile).
      v_sort := current_setting('enable_sort');
      v_jit := current_setting('jit');
      PERFORM set_config('enable_sort', 'off', true), set_config('jit', 'off', true)${counts ? `, ${selfCounted(true)}` : ''};
      RETURN QUERY${cached ? '' : ' EXECUTE $q$'}
      WITH picked AS (
        SELECT j.id FROM {s}.jobs j
        WHERE j.state = 'queued' AND j.type = ${type} AND j.tenant = ${tenant}
        ORDER BY j.priority, j.run_at, j.id
        LIMIT ${room}
        FOR UPDATE SKIP LOCKED
      ), moved AS (
        UPDATE {s}.jobs j
${claimSet(version, worker, now)}${version >= 16 ? `        WHERE j.id = ${probes('SELECT picked.id FROM picked')}` : `        FROM picked
        WHERE j.id = picked.id`}
        RETURNING j.*
${counts ? claimCountedCte : ''}      )
${claimedRows(version)}      ORDER BY m.priority, m.run_at, m.id${
        cached
          ? ';'
          : `
      $q$ USING p_types[v_t], p_worker, p_now, v_group, v_room;`
      }
      PERFORM set_config('enable_sort', v_sort, true), set_config('jit', v_jit, true)${counts ? `, ${selfCounted(false)}` : ''};
    END IF;
`;
};

/**
 * Migration 16: the claims find their rows by primary-key probes whatever the planner estimates.
 * Planned for the call at 10,000 queued jobs, the fast path's UPDATE joined its 500 picked ids to
 * the jobs table by a hash over the whole table (2-3 ms per claim, growing with the table), and the
 * claimed rows to progress the same way; the claim by id, given its array, could scan the table
 * too. Now the ids are an array the planner cannot size (`= ANY(ARRAY(SELECT ...))`: probes), and
 * each claimed row's progress is a subquery (a probe). Not by turning hash joins or sequential
 * scans off around the statement: such settings also hold for the triggers it fires, whose plans
 * are then cached for the session (the stats trigger joins a statement's old and new rows by a
 * hash; planned without, a completion of 500 jobs cost it 15 ms).
 */
const probes = (ids: string) => `ANY(ARRAY(${ids}))`;

/**
 * How every claim function starts (migrations 1, 3, 6 and later): READ COMMITTED checked, the
 * completions applied (their ordinals returned a row each, or from version 15 in one row), then
 * nothing more when there is nothing to claim, and due jobs promoted first.
 */
export function claimPrologue(oneRow: boolean, ended = false): string {
  return `    IF current_setting('transaction_isolation') <> 'read committed' THEN
      RAISE EXCEPTION 'Longhaul claims need READ COMMITTED isolation, not %', current_setting('transaction_isolation');
    END IF;
    IF ${ended ? 'p_rounds > 0 OR cardinality(p_ended_ids) > 0' : 'p_rounds > 0'} THEN${
      ended
        ? `
      -- Jobs ended as succeeded, to be deleted (retention 0), come as arrays (end_succeeded, no
      -- JSON to parse), the other completions as JSON; every applied ordinal in one row.
      applied := '{}';
      IF cardinality(p_ended_ids) > 0 THEN
        applied := {s}.end_succeeded(p_ended_ids, p_ended_leases, p_ended_ords, p_ended_ats, p_ended_expires, p_ended_results, p_worker);
      END IF;
      IF p_rounds > 0 THEN
        applied := applied || {s}.apply_transitions(p_items, p_rounds);
      END IF;
      RETURN NEXT;`
        : oneRow
        ? `
      -- Every applied ordinal in one row (a row each cost more to return and to read than the ordinal).
      applied := {s}.apply_transitions(p_items, p_rounds);
      RETURN NEXT;`
        : `
      v_done := {s}.apply_transitions(p_items, p_rounds);
      FOREACH applied IN ARRAY v_done LOOP
        RETURN NEXT;
      END LOOP;`
    }
      applied := NULL;
    END IF;
    IF p_limit <= 0 OR v_types = 0 THEN
      RETURN;
    END IF;
    PERFORM {s}.promote_due(p_now, 1000);
`;
}

/**
 * The claim function's text as migration 6 created it, or as migration 10 replaced it (the same
 * rules, cheaper): the single-queue fast path is taken when one type has queued jobs, however many
 * types the worker registered (a worker always registers the webhook delivery task too, so version 6
 * never took it), and the claim by id no longer re-checks the state (the rows are locked by this
 * transaction's FOR UPDATE: they are queued), which let the planner scan every queued job instead of
 * probing the primary key. Version 15 is the same rules as `claim_cycle` (one row of applied
 * ordinals; complete_and_claim stays for processes of the previous version); version 16 replaces
 * it: no log entry at the claim (log-sql.ts pendingClaim) and primary-key probes (probes); version
 * 17 replaces it again: the fast path's claim is planned once per session (fastClaim). Version
 * 18 is the same claim under a new name, `worker_cycle`, whose first arguments are the jobs the
 * worker ended as succeeded and asks to delete (retention 0), as arrays (end_succeeded in
 * transition-sql.ts); claim_cycle stays for the processes of the previous version. Version 19
 * replaces worker_cycle in place (the same arguments and columns): a rate-limited claim's time is
 * never before the type's last logged start (claim-rate-sql.ts).
 */
export function claimFunction(version: 6 | 10 | 12 | 15 | 16 | 17 | 18 | 19 | 20): string {
  const v10 = version >= 10;
  const v12 = version >= 12;
  const v15 = version >= 15;
  const v18 = version >= 18;
  const v19 = version >= 19;
  const v20 = version >= 20;
  const name = v18 ? 'worker_cycle' : v15 ? 'claim_cycle' : 'complete_and_claim';
  const now = claimNow(v19);
  const ended = v18 ? 'p_ended_ids uuid[], p_ended_leases integer[], p_ended_ords integer[], p_ended_ats bigint[], p_ended_expires bigint[], p_ended_results text[], ' : '';
  return `
  CREATE ${v10 && version !== 15 && version !== 18 ? 'OR REPLACE ' : ''}FUNCTION {s}.${name}(${ended}p_items json, p_rounds integer, p_worker text, p_types text[], p_limits integer[], p_limit integer,
    p_now bigint, p_key_limits integer[], p_rate_max integer[], p_rate_per bigint[], p_aging bigint,
    p_cap_tenants text[], p_caps integer[], p_cap_others integer)
  ${returns(version)}
  LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
  #variable_conflict use_column
  DECLARE
${v15 ? '' : `    v_done integer[];
`}    v_types integer := coalesce(array_length(p_types, 1), 0);
    v_step bigint := coalesce(p_aging, 10000000000000);
    v_room integer;
    v_count integer;
    v_fetch integer;
    v_wake bigint;
    v_at bigint;
    v_groups text[];
    v_group text;
    v_cap integer;
    v_alone boolean;
    v_rank smallint;
    v_cands {s}.claim_candidate[] := '{}';
    v_rtypes text[] := '{}';
    v_rrooms integer[] := '{}';
    v_ktypes text[] := '{}';
    v_kkeys text[] := '{}';
    v_krooms integer[] := '{}';
    v_ttenants text[] := '{}';
    v_trooms integer[] := '{}';
    v_tenants text[];
    v_rated text[] := '{}';
    v_ids uuid[];${v10 ? `
    v_t integer;
    v_heads integer[] := '{}';
    v_head_groups text[] := '{}';
    v_head_ranks smallint[] := '{}';
    v_head_rooms integer[] := '{}';` : ''}${v12 ? `
    v_fast boolean := false;
    v_sort text;
    v_jit text;` : ''}${v19 ? `
    v_now bigint := p_now;` : ''}
  BEGIN
${claimPrologue(v15, v18)}    <<types>>
    FOR v_i IN 1 .. v_types LOOP
      v_room := p_limit;
      IF p_limits[v_i] IS NOT NULL OR p_key_limits[v_i] IS NOT NULL OR p_rate_max[v_i] IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext('{name}:type-limit'), hashtext(p_types[v_i]));
      END IF;
      IF p_limits[v_i] IS NOT NULL THEN
        SELECT count(*) INTO v_count FROM {s}.jobs j WHERE j.state = 'running' AND j.type = p_types[v_i];
        v_room := least(v_room, p_limits[v_i] - v_count);
      END IF;
${rateRoom(v19)}      CONTINUE WHEN v_room <= 0;
      v_rtypes := v_rtypes || p_types[v_i];
      v_rrooms := v_rrooms || v_room;
      IF p_key_limits[v_i] IS NOT NULL THEN
        v_groups := {s}.claim_groups(p_types[v_i], true);
        v_fetch := {s}.per_group_fetch(v_room, cardinality(v_groups));
        FOREACH v_group IN ARRAY v_groups LOOP
          SELECT count(*) INTO v_count FROM {s}.jobs j
          WHERE j.state = 'running' AND j.ckey IS NOT NULL AND j.type = p_types[v_i] AND j.ckey = v_group;
          CONTINUE WHEN v_count >= p_key_limits[v_i];
          v_ktypes := v_ktypes || p_types[v_i];
          v_kkeys := v_kkeys || v_group;
          v_krooms := v_krooms || (p_key_limits[v_i] - v_count);
          v_cands := v_cands || ARRAY(
            SELECT ROW(j.id, j.type, j.tenant, j.priority, j.run_at, j.ckey)::{s}.claim_candidate FROM {s}.jobs j
            WHERE j.state = 'queued' AND j.ckey IS NOT NULL AND j.type = p_types[v_i] AND j.ckey = v_group
            ORDER BY j.priority, j.run_at, j.id
            -- With tenant caps, a key's first jobs may be a capped tenant's: read past them.
            LIMIT CASE WHEN cardinality(p_cap_tenants) > 0 OR p_cap_others IS NOT NULL THEN v_fetch ELSE least(p_key_limits[v_i] - v_count, v_fetch) END
            FOR UPDATE SKIP LOCKED);
        END LOOP;
        CONTINUE;
      END IF;
${v12 ? headsPasses(12) : v10 ? headsPasses(10) : V6_HEADS}    IF v_ids IS NULL AND cardinality(v_cands) > 0 THEN
      -- Tenant caps: each capped tenant's lock (in name order), then its running jobs counted.
      SELECT array_agg(DISTINCT c.tenant ORDER BY c.tenant) INTO v_tenants FROM unnest(v_cands) c;
      FOREACH v_group IN ARRAY v_tenants LOOP
        v_cap := CASE WHEN v_group = ANY(coalesce(p_cap_tenants, '{}')) THEN p_caps[array_position(p_cap_tenants, v_group)] ELSE p_cap_others END;
        CONTINUE WHEN v_cap IS NULL;
        PERFORM pg_advisory_xact_lock(hashtext('{name}:tenant-cap'), hashtext(v_group));
        SELECT count(*) INTO v_count FROM {s}.jobs j WHERE j.state = 'running' AND j.tenant = v_group;
        v_ttenants := v_ttenants || v_group;
        v_trooms := v_trooms || (v_cap - v_count);
      END LOOP;
      -- The plan: planClaim's steps as windows over the candidates in place order.
      SELECT array_agg(y.id ORDER BY y.load, y.place, y.id) INTO v_ids FROM (
        SELECT y.id, y.load, y.place FROM (
          SELECT l.*, row_number() OVER (PARTITION BY l.type ORDER BY l.load, l.place, l.id) AS ry FROM (
            SELECT t.*, coalesce(run.n, 0) + row_number() OVER (PARTITION BY t.tenant ORDER BY t.place, t.id) AS load FROM (
              SELECT k.* FROM (
                SELECT k.*, row_number() OVER (PARTITION BY k.type, k.ckey ORDER BY k.place, k.id) AS rk FROM (
                  SELECT c.* FROM (
                    SELECT c.*, row_number() OVER (PARTITION BY c.tenant ORDER BY c.place, c.id) AS rt FROM (
                      SELECT c.id, c.type, c.tenant, c.ckey, c.run_at + c.rank * v_step AS place FROM unnest(v_cands) c
                    ) c
                  ) c
                  LEFT JOIN unnest(v_ttenants, v_trooms) AS tr(tenant, room) ON tr.tenant = c.tenant
                  WHERE tr.room IS NULL OR c.rt <= tr.room
                ) k
              ) k
              LEFT JOIN unnest(v_ktypes, v_kkeys, v_krooms) AS kr(type, ckey, room) ON kr.type = k.type AND kr.ckey = k.ckey
              WHERE k.ckey IS NULL OR kr.room IS NULL OR k.rk <= kr.room
            ) t
            LEFT JOIN (
              SELECT j.tenant, count(*) AS n FROM {s}.jobs j
              WHERE j.state = 'running' AND j.type = ANY(v_rtypes) AND j.tenant = ANY(v_tenants) AND cardinality(v_tenants) > 1
              GROUP BY j.tenant
            ) run ON run.tenant = t.tenant
          ) l
        ) y
        JOIN unnest(v_rtypes, v_rrooms) AS rr(type, room) ON rr.type = y.type
        WHERE y.ry <= rr.room
        ORDER BY y.load, y.place, y.id
        LIMIT p_limit
      ) y;
    END IF;
${v12 ? fastClaim(version) : ''}    IF coalesce(cardinality(v_ids), 0) > 0 THEN
      -- The claim by primary key, planned for each call (EXECUTE; see migration 3), and the
      -- starts of rate-limited types logged in the same statement.
${v20 ? `      PERFORM ${selfCounted(true)};
` : ''}      RETURN QUERY EXECUTE $q$
      WITH moved AS (
        UPDATE {s}.jobs j
${claimSet(version)}        WHERE j.id = ${version >= 16 ? probes('SELECT unnest($1)') : 'ANY($1)'}${v10 ? '' : " AND j.state = 'queued'"}
        RETURNING j.*
      ), starts AS (
        INSERT INTO {s}.rate_starts (type, at) SELECT m.type, $3 FROM moved m WHERE m.type = ANY($4)
${v20 ? claimCountedCte : ''}      )
${claimedRows(version, v19 ? '$3' : undefined)}      ORDER BY array_position($1, m.id)
      $q$ USING v_ids, p_worker, ${now}, v_rated;${v20 ? `
      PERFORM ${selfCounted(false)};` : ''}
    END IF;
    IF v_wake IS NOT NULL THEN
      wake_at := v_wake;
      RETURN NEXT;
    END IF;
  END
  $fn$;`;
}

export const CLAIM_MIGRATION = `
  ALTER TABLE {s}.jobs ADD COLUMN ckey text COLLATE "C";
  DROP INDEX {s}.jobs_queued;
  CREATE INDEX jobs_queued ON {s}.jobs (type, tenant, priority, run_at, id) WHERE state = 'queued';
  DROP INDEX {s}.jobs_running;
  CREATE INDEX jobs_running ON {s}.jobs (type, tenant) WHERE state = 'running';
  CREATE INDEX jobs_queued_by_key ON {s}.jobs (type, ckey, priority, run_at, id) WHERE state = 'queued' AND ckey IS NOT NULL;
  CREATE INDEX jobs_running_by_key ON {s}.jobs (type, ckey) WHERE state = 'running' AND ckey IS NOT NULL;
  CREATE TABLE {s}.rate_starts (type text COLLATE "C" NOT NULL, at bigint NOT NULL);
  CREATE INDEX rate_starts_type ON {s}.rate_starts (type, at);
  ${CANDIDATE_TYPE};
  ${PER_GROUP_FETCH}
  ${GROUPS}
  DROP FUNCTION {s}.complete_and_claim(json, integer, text, text[], integer[], integer, bigint);
  ${claimFunction(6)}
`;
