-- Android devices through Firebase Cloud Messaging beside APNs ones, in the same registry.
-- `platform` says which service reaches a row's device; app APIs that write the table directly
-- and name no platform keep writing APNs devices ('apns' is the default). For FCM, `topic` is
-- the Android package, `token` the registration token or Firebase Installation ID exactly as
-- the app got it, and `fcm_target` says which of the two it is (NULL for APNs rows).
ALTER TABLE push.device_tokens
    ADD COLUMN IF NOT EXISTS platform text NOT NULL DEFAULT 'apns' CHECK (platform IN ('apns', 'fcm'));

ALTER TABLE push.device_tokens
    ADD COLUMN IF NOT EXISTS fcm_target text NULL CHECK (fcm_target IN ('token', 'fid'));

-- An FCM outcome in the delivery ledger is marked by `fcm`; its `apns_status` column holds FCM's
-- HTTP status and `apns_unique_id` the message name FCM returned (the provider's status and id),
-- so a row grows by one byte, not by two more columns. Defaulted, so adding it rewrites no
-- partition.
ALTER TABLE push.delivery_ledger ADD COLUMN IF NOT EXISTS fcm boolean NOT NULL DEFAULT false;
