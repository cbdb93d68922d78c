-- 10,000,000 outcomes over the 8 days up to today (1,250,000 a day), shaped like the bench's:
-- one or two devices per event, 64-hex tokens, short user IDs.
\timing on
DO $$
DECLARE today integer := floor(extract(epoch FROM now()) / 86400)::integer; d integer;
BEGIN
  FOR d IN 0..7 LOOP
    INSERT INTO push.delivery_ledger (event_key, day, token, device, user_id, status, sandbox, apns_status, attempts,
                                      latency_ms, completed_at)
    SELECT md5('fill-' || d || '-' || (i / 2))::uuid, today - d,
           decode(md5(d || ':' || i) || md5(i || ':' || d), 'hex'), true, 'u' || (i / 2), 1, false, 200, 1,
           12, (today - d)::bigint * 86400000 + i
    FROM generate_series(1, 1250000) AS i;
    RAISE NOTICE 'day % filled', today - d;
  END LOOP;
END $$;
VACUUM ANALYZE push.delivery_ledger;
