-- Breaker state is cached in every process (app/pipeline/keyhealth.py) and invalidated through NOTIFY: a change of a
-- key's failure count or open period, an inserted or deleted row, or a TRUNCATE notifies `relay_key_health` (payload:
-- the host key id, or '' for every key) when its transaction commits, whoever wrote it. A use that only moves
-- last_used_at / uses (least-recently-used tracking) does not notify: caches refresh that within a second.
CREATE OR REPLACE FUNCTION relay_key_health_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('relay_key_health', '');
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('relay_key_health', OLD.host_key_id::text);
    ELSE
        PERFORM pg_notify('relay_key_health', NEW.host_key_id::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER key_health_notify_insert_delete AFTER INSERT OR DELETE ON key_health
    FOR EACH ROW EXECUTE FUNCTION relay_key_health_notify();
CREATE TRIGGER key_health_notify_update AFTER UPDATE ON key_health
    FOR EACH ROW WHEN (OLD.consecutive_failures IS DISTINCT FROM NEW.consecutive_failures
                       OR OLD.opened_until IS DISTINCT FROM NEW.opened_until)
    EXECUTE FUNCTION relay_key_health_notify();
CREATE TRIGGER key_health_notify_truncate AFTER TRUNCATE ON key_health
    FOR EACH STATEMENT EXECUTE FUNCTION relay_key_health_notify();
