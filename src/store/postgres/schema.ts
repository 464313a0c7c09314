/**
 * PostgreSQL schema, as numbered migrations. Everything lives in one schema of its own
 * (`longhaul` by default), so Longhaul shares a database with the application that uses it
 * (transactional enqueue needs that) without touching the application's tables.
 *
 * The applied versions are rows of `<schema>.migrations`. `migrate()` runs every pending
 * migration in one transaction under a transaction-level advisory lock, so several processes
 * on several machines may migrate at once: one applies, the others wait and find nothing to do.
 *
 * Released migrations never change; a change of schema or of a function is a new migration.
 * In the SQL below `{s}` is the quoted schema, `{ch}` the wake-up channel (see channelName).
 */

/** A schema name we are willing to interpolate into SQL (it is also the channel name's prefix). */
export const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,39}$/;

/** The LISTEN/NOTIFY channel that says "jobs may be claimable": payloads are always empty. */
export function channelName(schema: string): string {
  return `${schema}_wake`;
}

/** The migration texts with the schema and channel filled in. */
export function renderMigrations(schema: string): string[] {
  if (!SCHEMA_NAME.test(schema)) throw new Error(`invalid PostgreSQL schema name "${schema}": use lower-case letters, digits and _ (at most 40)`);
  return MIGRATIONS.map((sql) => sql.replaceAll('{s}', `"${schema}"`).replaceAll('{ch}', channelName(schema)).replaceAll('{name}', schema));
}

/** SQL appending one entry to the log of the jobs row `j` being updated (`j.log` is its log before the change). */
export function logAppend(from: string, to: string, at: string, reason: string, attempt: string, worker: string): string {
  return `j.log || ',' || json_build_array(${from}, ${to}, ${at}, ${reason}, ${attempt}, ${worker})::text`;
}

/**
 * The same for an entry whose from, to and reason are constants: they are written into the SQL
 * as JSON text, which costs a third of json_build_array per row (`at` and `attempt` are bigint
 * and integer expressions, `worker` a text expression or NULL).
 */
export function logAppendFixed(from: string, to: string, at: string, reason: string, attempt: string, worker: string): string {
  const lit = (v: string) => `'${v.replaceAll("'", "''")}'`;
  return `j.log || ${lit(`,[${JSON.stringify(from)},${JSON.stringify(to)},`)} || (${at})::text || ${lit(`,${JSON.stringify(reason)},`)} || (${attempt})::text || ',' || coalesce(to_json(${worker})::text, 'null') || ']'`;
}

export const MIGRATIONS: readonly string[] = [
  // 1: jobs, their transition log, progress; the claim and transition functions.
  `
  CREATE TABLE {s}.jobs (
    id uuid PRIMARY KEY,
    tenant text COLLATE "C" NOT NULL,
    type text COLLATE "C" NOT NULL,
    state text NOT NULL CHECK (state IN ('pending', 'queued', 'running', 'retrying', 'waiting', 'succeeded', 'failed', 'cancelled', 'expired')),
    priority smallint NOT NULL,
    input json,
    metadata json,
    result json,
    error json,
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    lease integer NOT NULL DEFAULT 0,
    worker_id text,
    cancel_requested boolean NOT NULL DEFAULT false,
    cancel_reason text,
    cancel_requested_at bigint,
    stalled boolean NOT NULL DEFAULT false,
    parent_id text,
    created_at bigint NOT NULL,
    started_at bigint,
    finished_at bigint,
    updated_at bigint NOT NULL,
    run_at bigint NOT NULL,
    expires_at bigint,
    heartbeat_at bigint,
    timeout_ms bigint,
    heartbeat_timeout_ms bigint NOT NULL,
    stall_timeout_ms bigint,
    result_ttl_ms bigint NOT NULL,
    checkpoint json,
    idempotency_key text COLLATE "C",
    request_hash text,
    -- The transition log, oldest first: entries [from, to, at, reason, attempt, workerId] as
    -- JSON arrays separated by commas, so that a transition appends its entry to the row it
    -- updates anyway (no row and no index entry of its own); '[' || log || ']' is a JSON array.
    log text NOT NULL
  ) WITH (fillfactor = 85, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
  -- Partial indexes: a job entering a state adds an entry only to the index of that state.
  CREATE INDEX jobs_queued ON {s}.jobs (type, priority, run_at, id) WHERE state = 'queued';
  CREATE INDEX jobs_due ON {s}.jobs (run_at) WHERE state IN ('pending', 'retrying');
  CREATE INDEX jobs_running ON {s}.jobs (type) WHERE state = 'running';
  CREATE INDEX jobs_expiring ON {s}.jobs (expires_at) WHERE state = 'succeeded';
  CREATE INDEX jobs_tenant ON {s}.jobs (tenant, id);
  CREATE INDEX jobs_finished ON {s}.jobs (finished_at) WHERE finished_at IS NOT NULL;
  CREATE UNIQUE INDEX jobs_idempotency ON {s}.jobs (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;

  -- Progress is rewritten a few times a second per running job: keeping it out of the jobs row
  -- keeps those writes from making new versions of job rows. UNLOGGED: no WAL; a crash of the
  -- server empties it (jobs, their state and results are unaffected).
  CREATE UNLOGGED TABLE {s}.progress (
    job_id uuid PRIMARY KEY,
    data json NOT NULL,
    updated_at bigint NOT NULL
  );

  -- Moves due pending/retrying jobs to queued (earliest first, skipping rows another
  -- transaction holds) and wakes idle workers when it moved any.
  CREATE FUNCTION {s}.promote_due(p_now bigint, p_limit integer) RETURNS integer
  LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
  DECLARE
    v_count integer;
  BEGIN
    WITH due AS (
      SELECT j.id, j.state FROM {s}.jobs j
      WHERE j.state IN ('pending', 'retrying') AND j.run_at <= p_now
      ORDER BY j.run_at
      LIMIT p_limit
      FOR UPDATE SKIP LOCKED
    ), moved AS (
      UPDATE {s}.jobs j
      SET state = 'queued',
          updated_at = greatest(p_now, j.updated_at + 1, coalesce((SELECT p.updated_at FROM {s}.progress p WHERE p.job_id = j.id), 0) + 1),
          log = ${logAppend('due.state', "'queued'", 'p_now', "'due'", 'j.attempts', 'NULL::text')}
      FROM due
      WHERE j.id = due.id
      RETURNING j.id
    )
    SELECT count(*) INTO v_count FROM moved;
    IF v_count > 0 THEN
      PERFORM pg_notify('{ch}', '');
    END IF;
    RETURN v_count;
  END
  $fn$;

  -- Compare-and-swap transitions. p_items is a JSON array of
  --   {o: ordinal, r: round, id, f: from, t: to, l: lease?, q: cancel flag?, why, w: worker,
  --    at, m: bit mask of patch fields, run_at, result, error, finished_at, expires_at,
  --    cancel_reason, stalled}
  -- Items of one round have distinct ids; a job named twice in a batch has its second item in
  -- the next round, so items apply in order. Returns the ordinals that applied.
  -- Mask bits: 1 run_at, 2 result, 4 error, 8 finished_at, 16 expires_at, 32 reset attempts,
  -- 64 refund attempt, 128 clear checkpoint, 256 request cancel, 512 clear cancel, 1024 stalled.
  CREATE FUNCTION {s}.apply_transitions(p_items json, p_rounds integer) RETURNS integer[]
  LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
  DECLARE
    v_applied integer[] := '{}';
    v_part integer[];
    v_wake boolean;
    v_any_wake boolean := false;
  BEGIN
    FOR v_round IN 1 .. p_rounds LOOP
      WITH item AS (
        SELECT * FROM json_to_recordset(p_items) AS x(
          o integer, r integer, id uuid, f text, t text, l integer, q boolean, why text, w text, at bigint, m integer,
          run_at bigint, result json, error json, finished_at bigint, expires_at bigint, cancel_reason text, stalled boolean)
        WHERE x.r = v_round
      ), moved AS (
        UPDATE {s}.jobs j
        SET state = i.t,
            log = ${logAppend(
              'i.f',
              'i.t',
              'i.at',
              'i.why',
              'CASE WHEN i.m & 32 <> 0 THEN 0 WHEN i.m & 64 <> 0 THEN greatest(j.attempts - 1, 0) ELSE j.attempts END',
              'i.w',
            )},
            updated_at = greatest(i.at, j.updated_at + 1, coalesce((SELECT p.updated_at FROM {s}.progress p WHERE p.job_id = j.id), 0) + 1),
            run_at = CASE WHEN i.m & 1 <> 0 THEN i.run_at ELSE j.run_at END,
            result = CASE WHEN i.m & 2 <> 0 THEN i.result ELSE j.result END,
            error = CASE WHEN i.m & 4 <> 0 THEN i.error ELSE j.error END,
            finished_at = CASE WHEN i.m & 8 <> 0 THEN i.finished_at ELSE j.finished_at END,
            expires_at = CASE WHEN i.m & 16 <> 0 THEN i.expires_at ELSE j.expires_at END,
            attempts = CASE WHEN i.m & 32 <> 0 THEN 0 WHEN i.m & 64 <> 0 THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
            checkpoint = CASE WHEN i.m & 128 <> 0 THEN NULL ELSE j.checkpoint END,
            cancel_requested = CASE WHEN i.m & 256 <> 0 THEN true WHEN i.m & 512 <> 0 THEN false ELSE j.cancel_requested END,
            cancel_reason = CASE WHEN i.m & 256 <> 0 THEN i.cancel_reason WHEN i.m & 512 <> 0 THEN NULL ELSE j.cancel_reason END,
            cancel_requested_at = CASE WHEN i.m & 256 <> 0 THEN i.at WHEN i.m & 512 <> 0 THEN NULL ELSE j.cancel_requested_at END,
            stalled = CASE WHEN i.m & 1024 <> 0 THEN i.stalled ELSE j.stalled END
        FROM item i
        WHERE j.id = i.id AND j.state = i.f AND (i.l IS NULL OR j.lease = i.l) AND (i.q IS NULL OR j.cancel_requested = i.q)
        RETURNING j.id, j.state AS to_state, j.run_at, i.o, i.at
      ), dropped AS (
        DELETE FROM {s}.progress p USING moved WHERE p.job_id = moved.id AND moved.to_state = 'expired'
      )
      SELECT array_agg(moved.o), bool_or(moved.to_state = 'queued' OR (moved.to_state = 'retrying' AND moved.run_at <= moved.at))
      INTO v_part, v_wake
      FROM moved;
      v_applied := v_applied || coalesce(v_part, '{}');
      v_any_wake := v_any_wake OR coalesce(v_wake, false);
    END LOOP;
    IF v_any_wake THEN
      PERFORM pg_notify('{ch}', '');
    END IF;
    RETURN v_applied;
  END
  $fn$;

  -- A worker's cycle in one call (one round trip, one transaction): apply its completions, then
  -- promote due jobs and claim up to p_limit queued jobs of p_types in queue order.
  --
  -- Per-type concurrency: for each limited type (p_limits[i] not null) the claim takes a
  -- transaction-level advisory lock on that type, then counts its running jobs in a new
  -- statement (so the count sees every claim committed before the lock was granted), and
  -- claims at most the room left. Claims of one limited type are therefore serialised across
  -- all workers, exactly; unlimited types take no lock and only skip each other's rows (SKIP
  -- LOCKED). p_types must be sorted, so that locks are always taken in the same order.
  --
  -- Rows: first one row per applied completion (only \`applied\`, its ordinal, is set), then one
  -- row per claimed job (\`applied\` is null).
  CREATE FUNCTION {s}.complete_and_claim(p_items json, p_rounds integer, p_worker text, p_types text[], p_limits integer[], p_limit integer, p_now bigint)
  RETURNS TABLE (
    applied integer, id uuid, tenant text, type text, state text, priority smallint, input text, metadata text, result text, error text,
    attempts integer, max_attempts integer, lease integer, worker_id text, cancel_requested boolean, cancel_reason text,
    cancel_requested_at bigint, stalled boolean, parent_id text, created_at bigint, started_at bigint, finished_at bigint,
    updated_at bigint, run_at bigint, expires_at bigint, heartbeat_at bigint, timeout_ms bigint, heartbeat_timeout_ms bigint,
    stall_timeout_ms bigint, result_ttl_ms bigint, checkpoint text, idempotency_key text, progress text)
  LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
  #variable_conflict use_column
  DECLARE
    v_done integer[];
    v_rooms integer[] := '{}';
    v_running integer;
    v_types integer := coalesce(array_length(p_types, 1), 0);
  BEGIN
    -- Under a stricter default isolation every statement here would share one snapshot: the
    -- running counts could miss claims committed while we waited for a type's lock.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
      RAISE EXCEPTION 'Longhaul claims need READ COMMITTED isolation, not %', current_setting('transaction_isolation');
    END IF;
    IF p_rounds > 0 THEN
      v_done := {s}.apply_transitions(p_items, p_rounds);
      FOREACH applied IN ARRAY v_done LOOP
        RETURN NEXT;
      END LOOP;
      applied := NULL;
    END IF;
    IF p_limit <= 0 OR v_types = 0 THEN
      RETURN;
    END IF;
    PERFORM {s}.promote_due(p_now, 1000);
    FOR v_i IN 1 .. v_types LOOP
      IF p_limits[v_i] IS NULL THEN
        v_rooms := v_rooms || p_limit;
      ELSE
        PERFORM pg_advisory_xact_lock(hashtext('{name}:type-limit'), hashtext(p_types[v_i]));
        SELECT count(*) INTO v_running FROM {s}.jobs j WHERE j.state = 'running' AND j.type = p_types[v_i];
        v_rooms := v_rooms || greatest(0, least(p_limit, p_limits[v_i] - v_running));
      END IF;
    END LOOP;
    RETURN QUERY
    WITH cand AS (
      SELECT c.id FROM unnest(p_types, v_rooms) AS t(type, room)
      CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at FROM {s}.jobs j
        WHERE j.state = 'queued' AND j.type = t.type
        ORDER BY j.priority, j.run_at, j.id
        LIMIT t.room
        FOR UPDATE SKIP LOCKED
      ) c
      ORDER BY c.priority, c.run_at, c.id
      LIMIT p_limit
    ), moved AS (
      UPDATE {s}.jobs j
      SET state = 'running',
          lease = j.lease + 1,
          attempts = j.attempts + 1,
          worker_id = p_worker,
          started_at = p_now,
          heartbeat_at = p_now,
          stalled = false,
          log = ${logAppendFixed('queued', 'running', 'p_now', 'claimed', 'j.attempts + 1', 'p_worker')},
          updated_at = greatest(p_now, j.updated_at + 1, coalesce((SELECT p.updated_at FROM {s}.progress p WHERE p.job_id = j.id), 0) + 1)
      FROM cand
      WHERE j.id = cand.id AND j.state = 'queued'
      RETURNING j.*
    )
    SELECT NULL::integer, m.id, m.tenant, m.type, m.state, m.priority, m.input::text, m.metadata::text, m.result::text, m.error::text,
      m.attempts, m.max_attempts, m.lease, m.worker_id, m.cancel_requested, m.cancel_reason,
      m.cancel_requested_at, m.stalled, m.parent_id, m.created_at, m.started_at, m.finished_at,
      m.updated_at, m.run_at, m.expires_at, m.heartbeat_at, m.timeout_ms, m.heartbeat_timeout_ms,
      m.stall_timeout_ms, m.result_ttl_ms, m.checkpoint::text, m.idempotency_key, p.data::text
    FROM moved m LEFT JOIN {s}.progress p ON p.job_id = m.id
    ORDER BY m.priority, m.run_at, m.id;
  END
  $fn$;
  `,
  // 2: result files, webhook targets and the webhook delivery log (issue 5)
  `
  CREATE TABLE {s}.job_results (
    job_id uuid NOT NULL,
    name text COLLATE "C" NOT NULL,
    seq integer NOT NULL,
    size bigint NOT NULL,
    content_type text NOT NULL,
    sha256 text NOT NULL,
    key text NOT NULL,
    downloads integer NOT NULL DEFAULT 0,
    created_at bigint NOT NULL,
    PRIMARY KEY (job_id, name)
  );
  CREATE TABLE {s}.job_webhooks (
    job_id uuid PRIMARY KEY,
    url text NOT NULL,
    secret text,
    pending boolean NOT NULL DEFAULT true,
    notified_finished_at bigint
  );
  CREATE INDEX job_webhooks_pending ON {s}.job_webhooks (job_id) WHERE pending;
  CREATE TABLE {s}.webhook_deliveries (
    seq bigserial PRIMARY KEY,
    job_id uuid NOT NULL,
    delivery_id uuid NOT NULL,
    event_type text NOT NULL,
    attempt integer NOT NULL,
    at bigint NOT NULL,
    url text NOT NULL,
    status integer,
    ok boolean NOT NULL,
    error text,
    duration_ms integer NOT NULL,
    response_snippet text
  );
  CREATE INDEX webhook_deliveries_job ON {s}.webhook_deliveries (job_id, seq);
  `,
  // 3: every update of a job can be HOT. No index of jobs names a column that a transition
  // changes (state, lease, times, log…), so a claim, a completion or a heartbeat writes a new
  // version of the row on its page and no index entry (the partial indexes of migration 1 made
  // each claim and completion add 3–4 B-tree entries). Which jobs are queued, due, running,
  // expiring or finished is kept in small side tables, written in the same statements as the
  // job rows:
  //   queue     the queued jobs in claim order: inserted on entering queued, deleted on claim;
  //   due       the pending and retrying jobs by run_at (promote_due moves them to queue);
  //   running   the running jobs by type: per-type concurrency counts, the sweeper's scans;
  //   expiring  the succeeded jobs by expires_at: the expiry sweep;
  //   finished  one row per finish (finished_at, job id), BRIN-indexed: activity's "finished
  //             since"; a row counts only while it matches the job's finished_at.
  // The jobs table is locked for the whole migration, so no job changes between the copy into
  // the side tables and the drop of the old indexes. Processes of an older version must be
  // stopped before this migration runs: their submits would not add queue rows (docs/scaling.md).
  `
  LOCK TABLE {s}.jobs IN ACCESS EXCLUSIVE MODE;
  DROP INDEX {s}.jobs_queued, {s}.jobs_due, {s}.jobs_running, {s}.jobs_expiring, {s}.jobs_finished;
  -- fillfactor 50: a claim and a completion each write a new version of the row, and a HOT
  -- update needs room for it on the same page (a batch of 500 claims leaves no time to prune).
  ALTER TABLE {s}.jobs SET (fillfactor = 50);

  CREATE TABLE {s}.queue (
    id uuid PRIMARY KEY,
    type text COLLATE "C" NOT NULL,
    priority smallint NOT NULL,
    run_at bigint NOT NULL
  );
  CREATE INDEX queue_order ON {s}.queue (type, priority, run_at, id);
  CREATE TABLE {s}.due (
    id uuid PRIMARY KEY,
    run_at bigint NOT NULL
  );
  CREATE INDEX due_run_at ON {s}.due (run_at);
  CREATE TABLE {s}.running (
    type text COLLATE "C" NOT NULL,
    job_id uuid NOT NULL,
    PRIMARY KEY (type, job_id)
  );
  CREATE TABLE {s}.expiring (
    expires_at bigint NOT NULL,
    job_id uuid NOT NULL,
    PRIMARY KEY (expires_at, job_id)
  );
  CREATE TABLE {s}.finished (
    finished_at bigint NOT NULL,
    job_id uuid NOT NULL
  );
  CREATE INDEX finished_at ON {s}.finished USING brin (finished_at);

  INSERT INTO {s}.queue (id, type, priority, run_at) SELECT id, type, priority, run_at FROM {s}.jobs WHERE state = 'queued';
  INSERT INTO {s}.due (id, run_at) SELECT id, run_at FROM {s}.jobs WHERE state IN ('pending', 'retrying');
  INSERT INTO {s}.running (type, job_id) SELECT type, id FROM {s}.jobs WHERE state = 'running';
  INSERT INTO {s}.expiring (expires_at, job_id) SELECT expires_at, id FROM {s}.jobs WHERE state = 'succeeded' AND expires_at IS NOT NULL;
  INSERT INTO {s}.finished (finished_at, job_id) SELECT finished_at, id FROM {s}.jobs WHERE finished_at IS NOT NULL ORDER BY finished_at;
  -- Moves due pending/retrying jobs to queued (earliest first, skipping rows another
  -- transaction holds) and wakes idle workers when it moved any.
  CREATE OR REPLACE FUNCTION {s}.promote_due(p_now bigint, p_limit integer) RETURNS integer
  LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
  DECLARE
    v_count integer;
  BEGIN
    -- Lock order: a due row, then its job row (as in apply_transitions).
    WITH d AS (
      SELECT d.id, d.ctid AS drow FROM {s}.due d
      WHERE d.run_at <= p_now
      ORDER BY d.run_at
      LIMIT p_limit
      FOR UPDATE SKIP LOCKED
    ), gone AS (
      DELETE FROM {s}.due d WHERE d.ctid = ANY(ARRAY(SELECT d.drow FROM d)) RETURNING d.id
    ), moved AS (
      UPDATE {s}.jobs j
      SET state = 'queued',
          updated_at = greatest(p_now, j.updated_at + 1, coalesce((SELECT p.updated_at FROM {s}.progress p WHERE p.job_id = j.id), 0) + 1),
          log = ${logAppend('j.state', "'queued'", 'p_now', "'due'", 'j.attempts', 'NULL::text')}
      WHERE j.id = ANY(ARRAY(SELECT gone.id FROM gone)) AND j.state IN ('pending', 'retrying')
      RETURNING j.id, j.type, j.priority, j.run_at
    ), enqueued AS (
      INSERT INTO {s}.queue (id, type, priority, run_at) SELECT moved.id, moved.type, moved.priority, moved.run_at FROM moved
    )
    SELECT count(*) INTO v_count FROM moved;
    IF v_count > 0 THEN
      PERFORM pg_notify('{ch}', '');
    END IF;
    RETURN v_count;
  END
  $fn$;

  -- Compare-and-swap transitions. p_items is a JSON array of
  --   {o: ordinal, r: round, id, f: from, t: to, l: lease?, q: cancel flag?, why, w: worker,
  --    at, m: bit mask of patch fields, run_at, result, error, finished_at, expires_at,
  --    cancel_reason, stalled}
  -- Items of one round have distinct ids; a job named twice in a batch has its second item in
  -- the next round, so items apply in order. Returns the ordinals that applied.
  -- Mask bits: 1 run_at, 2 result, 4 error, 8 finished_at, 16 expires_at, 32 reset attempts,
  -- 64 refund attempt, 128 clear checkpoint, 256 request cancel, 512 clear cancel, 1024 stalled.
  CREATE OR REPLACE FUNCTION {s}.apply_transitions(p_items json, p_rounds integer) RETURNS integer[]
  LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
  DECLARE
    v_applied integer[] := '{}';
    v_part integer[];
    v_wake boolean;
    v_any_wake boolean := false;
  BEGIN
    FOR v_round IN 1 .. p_rounds LOOP
      -- Lock order: a queue or due row before its job row, as the claim and promote_due take
      -- them. Only items leaving queued, pending or retrying need it; the text test spares the
      -- usual batch (completions, all from running) a second parse of p_items.
      IF strpos(p_items::text, '"f":"queued"') > 0 OR strpos(p_items::text, '"f":"pending"') > 0 OR strpos(p_items::text, '"f":"retrying"') > 0 THEN
        PERFORM 1 FROM {s}.queue q
        WHERE q.id = ANY(ARRAY(SELECT x.id FROM json_to_recordset(p_items) AS x(r integer, id uuid, f text) WHERE x.r = v_round AND x.f = 'queued'))
        ORDER BY q.id FOR UPDATE;
        PERFORM 1 FROM {s}.due d
        WHERE d.id = ANY(ARRAY(SELECT x.id FROM json_to_recordset(p_items) AS x(r integer, id uuid, f text) WHERE x.r = v_round AND x.f IN ('pending', 'retrying')))
        ORDER BY d.id FOR UPDATE;
      END IF;
      WITH item AS (
        SELECT * FROM json_to_recordset(p_items) AS x(
          o integer, r integer, id uuid, f text, t text, l integer, q boolean, why text, w text, at bigint, m integer,
          run_at bigint, result json, error json, finished_at bigint, expires_at bigint, cancel_reason text, stalled boolean)
        WHERE x.r = v_round
      ), moved AS (
        UPDATE {s}.jobs j
        SET state = i.t,
            log = ${logAppend(
              'i.f',
              'i.t',
              'i.at',
              'i.why',
              'CASE WHEN i.m & 32 <> 0 THEN 0 WHEN i.m & 64 <> 0 THEN greatest(j.attempts - 1, 0) ELSE j.attempts END',
              'i.w',
            )},
            updated_at = greatest(i.at, j.updated_at + 1, coalesce((SELECT p.updated_at FROM {s}.progress p WHERE p.job_id = j.id), 0) + 1),
            run_at = CASE WHEN i.m & 1 <> 0 THEN i.run_at ELSE j.run_at END,
            result = CASE WHEN i.m & 2 <> 0 THEN i.result ELSE j.result END,
            error = CASE WHEN i.m & 4 <> 0 THEN i.error ELSE j.error END,
            finished_at = CASE WHEN i.m & 8 <> 0 THEN i.finished_at ELSE j.finished_at END,
            expires_at = CASE WHEN i.m & 16 <> 0 THEN i.expires_at ELSE j.expires_at END,
            attempts = CASE WHEN i.m & 32 <> 0 THEN 0 WHEN i.m & 64 <> 0 THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
            checkpoint = CASE WHEN i.m & 128 <> 0 THEN NULL ELSE j.checkpoint END,
            cancel_requested = CASE WHEN i.m & 256 <> 0 THEN true WHEN i.m & 512 <> 0 THEN false ELSE j.cancel_requested END,
            cancel_reason = CASE WHEN i.m & 256 <> 0 THEN i.cancel_reason WHEN i.m & 512 <> 0 THEN NULL ELSE j.cancel_reason END,
            cancel_requested_at = CASE WHEN i.m & 256 <> 0 THEN i.at WHEN i.m & 512 <> 0 THEN NULL ELSE j.cancel_requested_at END,
            stalled = CASE WHEN i.m & 1024 <> 0 THEN i.stalled ELSE j.stalled END
        FROM item i
        WHERE j.id = i.id AND j.state = i.f AND (i.l IS NULL OR j.lease = i.l) AND (i.q IS NULL OR j.cancel_requested = i.q)
        RETURNING j.id, i.f AS from_state, j.state AS to_state, j.type, j.priority, j.run_at, j.finished_at, j.expires_at, i.m, i.o, i.at
      ), dropped AS (
        DELETE FROM {s}.progress p USING moved WHERE p.job_id = moved.id AND moved.to_state = 'expired'
      ), unqueued AS (
        DELETE FROM {s}.queue q USING moved WHERE q.id = moved.id AND moved.from_state = 'queued' AND moved.to_state <> 'queued'
      ), undue AS (
        DELETE FROM {s}.due d USING moved WHERE d.id = moved.id AND moved.from_state IN ('pending', 'retrying') AND moved.to_state <> moved.from_state
      ), stopped AS (
        DELETE FROM {s}.running r USING moved
        WHERE r.type = moved.type AND r.job_id = moved.id AND moved.from_state = 'running' AND moved.to_state <> 'running'
      ), unexpiring AS (
        DELETE FROM {s}.expiring e USING moved
        WHERE e.expires_at = moved.expires_at AND e.job_id = moved.id AND moved.from_state = 'succeeded' AND moved.to_state <> 'succeeded'
      ), enqueued AS (
        INSERT INTO {s}.queue (id, type, priority, run_at)
        SELECT moved.id, moved.type, moved.priority, moved.run_at FROM moved WHERE moved.to_state = 'queued' AND moved.from_state <> 'queued'
      ), scheduled AS (
        INSERT INTO {s}.due (id, run_at)
        SELECT moved.id, moved.run_at FROM moved WHERE moved.to_state IN ('pending', 'retrying') AND moved.from_state <> moved.to_state
      ), expiring AS (
        INSERT INTO {s}.expiring (expires_at, job_id)
        SELECT moved.expires_at, moved.id FROM moved WHERE moved.to_state = 'succeeded' AND moved.from_state <> 'succeeded' AND moved.expires_at IS NOT NULL
      ), finishing AS (
        INSERT INTO {s}.finished (finished_at, job_id)
        SELECT moved.finished_at, moved.id FROM moved WHERE moved.m & 8 <> 0 AND moved.finished_at IS NOT NULL
      )
      SELECT array_agg(moved.o), bool_or(moved.to_state = 'queued' OR (moved.to_state = 'retrying' AND moved.run_at <= moved.at))
      INTO v_part, v_wake
      FROM moved;
      v_applied := v_applied || coalesce(v_part, '{}');
      v_any_wake := v_any_wake OR coalesce(v_wake, false);
    END LOOP;
    IF v_any_wake THEN
      PERFORM pg_notify('{ch}', '');
    END IF;
    RETURN v_applied;
  END
  $fn$;

  -- A worker's cycle in one call (one round trip, one transaction): apply its completions, then
  -- promote due jobs and claim up to p_limit queued jobs of p_types in queue order.
  --
  -- Per-type concurrency: for each limited type (p_limits[i] not null) the claim takes a
  -- transaction-level advisory lock on that type, then counts its running jobs in a new
  -- statement (so the count sees every claim committed before the lock was granted), and
  -- claims at most the room left. Claims of one limited type are therefore serialised across
  -- all workers, exactly; unlimited types take no lock and only skip each other's rows (SKIP
  -- LOCKED). p_types must be sorted, so that locks are always taken in the same order.
  --
  -- Rows: first one row per applied completion (only \`applied\`, its ordinal, is set), then one
  -- row per claimed job (\`applied\` is null).
  CREATE OR REPLACE FUNCTION {s}.complete_and_claim(p_items json, p_rounds integer, p_worker text, p_types text[], p_limits integer[], p_limit integer, p_now bigint)
  RETURNS TABLE (
    applied integer, id uuid, tenant text, type text, state text, priority smallint, input text, metadata text, result text, error text,
    attempts integer, max_attempts integer, lease integer, worker_id text, cancel_requested boolean, cancel_reason text,
    cancel_requested_at bigint, stalled boolean, parent_id text, created_at bigint, started_at bigint, finished_at bigint,
    updated_at bigint, run_at bigint, expires_at bigint, heartbeat_at bigint, timeout_ms bigint, heartbeat_timeout_ms bigint,
    stall_timeout_ms bigint, result_ttl_ms bigint, checkpoint text, idempotency_key text, progress text)
  LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
  #variable_conflict use_column
  DECLARE
    v_done integer[];
    v_rooms integer[] := '{}';
    v_running integer;
    v_types integer := coalesce(array_length(p_types, 1), 0);
  BEGIN
    -- Under a stricter default isolation every statement here would share one snapshot: the
    -- running counts could miss claims committed while we waited for a type's lock.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
      RAISE EXCEPTION 'Longhaul claims need READ COMMITTED isolation, not %', current_setting('transaction_isolation');
    END IF;
    IF p_rounds > 0 THEN
      v_done := {s}.apply_transitions(p_items, p_rounds);
      FOREACH applied IN ARRAY v_done LOOP
        RETURN NEXT;
      END LOOP;
      applied := NULL;
    END IF;
    IF p_limit <= 0 OR v_types = 0 THEN
      RETURN;
    END IF;
    PERFORM {s}.promote_due(p_now, 1000);
    FOR v_i IN 1 .. v_types LOOP
      IF p_limits[v_i] IS NULL THEN
        v_rooms := v_rooms || p_limit;
      ELSE
        PERFORM pg_advisory_xact_lock(hashtext('{name}:type-limit'), hashtext(p_types[v_i]));
        SELECT count(*) INTO v_running FROM {s}.running r WHERE r.type = p_types[v_i];
        v_rooms := v_rooms || greatest(0, least(p_limit, p_limits[v_i] - v_running));
      END IF;
    END LOOP;
    -- Lock order: a queue row, then its job row. A transition out of queued (a cancel) takes
    -- the queue row first too (see apply_transitions), so waiting for a job row here is safe.
    RETURN QUERY
    WITH cand AS (
      SELECT c.id, c.qrow FROM unnest(p_types, v_rooms) AS t(type, room)
      CROSS JOIN LATERAL (
        SELECT q.id, q.ctid AS qrow, q.priority, q.run_at FROM {s}.queue q
        WHERE q.type = t.type
        ORDER BY q.priority, q.run_at, q.id
        LIMIT t.room
        FOR UPDATE SKIP LOCKED
      ) c
      ORDER BY c.priority, c.run_at, c.id
      LIMIT p_limit
    ), taken AS (
      DELETE FROM {s}.queue q WHERE q.ctid = ANY(ARRAY(SELECT cand.qrow FROM cand)) RETURNING q.id
    ), moved AS (
      UPDATE {s}.jobs j
      SET state = 'running',
          lease = j.lease + 1,
          attempts = j.attempts + 1,
          worker_id = p_worker,
          started_at = p_now,
          heartbeat_at = p_now,
          stalled = false,
          log = ${logAppendFixed('queued', 'running', 'p_now', 'claimed', 'j.attempts + 1', 'p_worker')},
          updated_at = greatest(p_now, j.updated_at + 1, coalesce((SELECT p.updated_at FROM {s}.progress p WHERE p.job_id = j.id), 0) + 1)
      WHERE j.id = ANY(ARRAY(SELECT taken.id FROM taken)) AND j.state = 'queued'
      RETURNING j.*
    ), started AS (
      INSERT INTO {s}.running (type, job_id) SELECT m.type, m.id FROM moved m
    )
    SELECT NULL::integer, m.id, m.tenant, m.type, m.state, m.priority, m.input::text, m.metadata::text, m.result::text, m.error::text,
      m.attempts, m.max_attempts, m.lease, m.worker_id, m.cancel_requested, m.cancel_reason,
      m.cancel_requested_at, m.stalled, m.parent_id, m.created_at, m.started_at, m.finished_at,
      m.updated_at, m.run_at, m.expires_at, m.heartbeat_at, m.timeout_ms, m.heartbeat_timeout_ms,
      m.stall_timeout_ms, m.result_ttl_ms, m.checkpoint::text, m.idempotency_key, p.data::text
    FROM moved m LEFT JOIN {s}.progress p ON p.job_id = m.id
    ORDER BY m.priority, m.run_at, m.id;
  END
  $fn$;
  `,
];
