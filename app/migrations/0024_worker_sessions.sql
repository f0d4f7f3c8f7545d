-- A worker process holds a session-level advisory lock (key 1578793731, hashtext of its worker id) on its heartbeat
-- connection for as long as it lives. A process that is only paused (SIGSTOP, a long GC) keeps its session and so
-- its lock; one that died loses both when its connection closes (a host gone: when the server's TCP keepalives
-- give up). The reaper judges a running item's worker lost only when its heartbeat is stale AND this says no
-- session holds its lock, so answers a paused worker already has are recorded when it resumes.
CREATE OR REPLACE FUNCTION relay_worker_session(worker text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT worker IS NOT NULL AND EXISTS (
        SELECT 1 FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.classid = 1578793731::oid AND l.objid = hashtext(worker)::oid)
$$;
