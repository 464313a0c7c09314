/**
 * The per-type rate limit in the worker's claim function (claim-sql.ts claimFunction): a
 * sliding-window log (`rate_starts`). Under the type's advisory lock, the starts older than the
 * window are deleted and the rest counted; the room is the limit less that count, and when the
 * window is full, the claim reports when its oldest start that matters leaves it (`v_wake`).
 *
 * Migration 19: the window never moves back. A worker reads its clock (p_now) before it waits for
 * the type's lock, so a claim that read an earlier time can take the lock after one that read a
 * later time. That later claim has already deleted the starts older than its own window, some of
 * which are still inside the earlier claim's: the earlier claim counted too few and could start
 * more than the limit in one window (seen on CI: 24 starts in one second under a limit of 20 per
 * second, three worker processes). So the claim's time (`v_now`) becomes the latest of its own
 * clock and the type's last logged start: the log only grows in time, each window is counted
 * whole, and the claimed jobs' started_at is that time (the claimed rows return it, rows.ts).
 */

/** The claim's time in the claim function: from version 19, `v_now` (never before a logged start). */
export const claimNow = (v19: boolean) => (v19 ? 'v_now' : 'p_now');

/** The rate limit's step for type `v_i`, inside the claim's loop over its types. */
export const rateRoom = (v19: boolean) => {
  const now = claimNow(v19);
  return `      IF p_rate_max[v_i] IS NOT NULL AND v_room > 0 THEN
        v_rated := v_rated || p_types[v_i];
${v19 ? '        SELECT greatest(v_now, max(r.at)) INTO v_now FROM {s}.rate_starts r WHERE r.type = p_types[v_i];\n' : ''}        DELETE FROM {s}.rate_starts r WHERE r.type = p_types[v_i] AND r.at <= ${now} - p_rate_per[v_i];
        SELECT count(*) INTO v_count FROM {s}.rate_starts r WHERE r.type = p_types[v_i];
        IF v_count >= p_rate_max[v_i] THEN
          SELECT r.at + p_rate_per[v_i] INTO v_at FROM {s}.rate_starts r WHERE r.type = p_types[v_i]
          ORDER BY r.at OFFSET v_count - p_rate_max[v_i] LIMIT 1;
          v_wake := least(coalesce(v_wake, v_at), v_at);
        END IF;
        v_room := least(v_room, p_rate_max[v_i] - v_count);
      END IF;
`;
};
