-- Rate limits by leases: each process takes a slice of a window (requests and tokens) in one statement and admits
-- from it in memory. A window row now counts what was *granted* to processes (never more than the limit), split
-- by consumer: batch_requests / batch_tokens are the part granted to batch items, which a policy's
-- `batch: {share}` caps, so that live calls keep the rest. Tokens are leased too; a process whose requests used
-- more tokens than it leased repays the difference with its next statement.
ALTER TABLE rate_limit_windows
    ADD COLUMN batch_requests bigint NOT NULL DEFAULT 0,
    ADD COLUMN batch_tokens bigint NOT NULL DEFAULT 0;

-- Pacing (README, "Pacing"): a paced policy's batch items wait for budget instead of being discarded.
ALTER TABLE policies
    ADD COLUMN batch_pace boolean NOT NULL DEFAULT false,
    ADD COLUMN batch_share double precision NOT NULL DEFAULT 1 CHECK (batch_share > 0 AND batch_share <= 1);

-- One lease statement for one window of one limit, under the window row's lock:
--   hand back P_RETURN_REQUESTS / P_RETURN_TOKENS unused, add P_REPAY_TOKENS spent beyond the last lease, then grant
--   up to P_WANT_REQUESTS / P_WANT_TOKENS within the limit (read from policy_rate_limits, so every replica uses
--   the same numbers) and, for a batch consumer, within P_BATCH_FRACTION of it. No requests are granted when the
--   caller would hold no tokens (P_BALANCE + granted tokens <= 0 on a token limit): they could not be used.
CREATE FUNCTION relay_take_lease(p_limit uuid, p_start timestamptz, p_batch boolean, p_want_requests bigint,
                                 p_want_tokens bigint, p_return_requests bigint, p_return_tokens bigint,
                                 p_repay_tokens bigint, p_balance bigint, p_batch_fraction double precision)
RETURNS TABLE (granted_requests bigint, granted_tokens bigint, window_requests bigint, window_tokens bigint,
               window_batch_requests bigint, window_batch_tokens bigint)
LANGUAGE plpgsql AS $$
DECLARE
    lim record;
    w record;
    room bigint;
    gr bigint := 0;
    gt bigint := 0;
BEGIN
    SELECT l.requests, l.tokens INTO lim FROM policy_rate_limits l WHERE l.id = p_limit;
    IF NOT FOUND THEN  -- the limit was removed from the catalog: nothing left to enforce
        RETURN QUERY SELECT p_want_requests, p_want_tokens, 0::bigint, 0::bigint, 0::bigint, 0::bigint;
        RETURN;
    END IF;
    INSERT INTO rate_limit_windows (limit_id, window_start) VALUES (p_limit, p_start) ON CONFLICT DO NOTHING;
    SELECT rw.requests, rw.tokens, rw.batch_requests, rw.batch_tokens INTO w FROM rate_limit_windows rw
        WHERE rw.limit_id = p_limit AND rw.window_start = p_start FOR UPDATE;
    w.requests := greatest(0, w.requests - p_return_requests);
    w.tokens := greatest(0, w.tokens - p_return_tokens + p_repay_tokens);
    IF p_batch THEN
        w.batch_requests := greatest(0, w.batch_requests - p_return_requests);
        w.batch_tokens := greatest(0, w.batch_tokens - p_return_tokens + p_repay_tokens);
    END IF;
    IF lim.tokens IS NULL THEN
        gt := p_want_tokens;
    ELSE
        room := lim.tokens - w.tokens;
        IF p_batch THEN
            room := least(room, floor(lim.tokens * p_batch_fraction)::bigint - w.batch_tokens);
        END IF;
        gt := greatest(0, least(p_want_tokens, room));
    END IF;
    IF lim.tokens IS NULL OR p_balance + gt > 0 THEN
        IF lim.requests IS NULL THEN
            gr := p_want_requests;
        ELSE
            room := lim.requests - w.requests;
            IF p_batch THEN
                room := least(room, floor(lim.requests * p_batch_fraction)::bigint - w.batch_requests);
            END IF;
            gr := greatest(0, least(p_want_requests, room));
        END IF;
    END IF;
    w.requests := w.requests + gr;
    w.tokens := w.tokens + gt;
    IF p_batch THEN
        w.batch_requests := w.batch_requests + gr;
        w.batch_tokens := w.batch_tokens + gt;
    END IF;
    UPDATE rate_limit_windows rw SET requests = w.requests, tokens = w.tokens, batch_requests = w.batch_requests,
                                     batch_tokens = w.batch_tokens
        WHERE rw.limit_id = p_limit AND rw.window_start = p_start;
    RETURN QUERY SELECT gr, gt, w.requests, w.tokens, w.batch_requests, w.batch_tokens;
END
$$;
