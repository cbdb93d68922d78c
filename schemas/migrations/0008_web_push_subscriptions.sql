-- Migration 8: browsers and installed web apps (standard Web Push) in the same registry.
--
-- For a row with platform 'webpush', `topic` is the web app (the key of its VAPID key pair),
-- `token` the subscription's endpoint (an https URL on a push service), and the new columns hold
-- what its messages are encrypted to: `webpush_p256dh` (the browser's P-256 public key) and
-- `webpush_auth` (its 16-byte secret), both base64url as PushSubscription.toJSON() gives them,
-- and `webpush_vapid_key`, the application server key (VAPID public key, base64url) the
-- subscription was made with; NULL means the app's current key. Rows of the other platforms
-- keep the three NULL.
--
-- Both checks are added NOT VALID and validated afterwards: adding one then takes a brief lock
-- and scans nothing, and the validation reads the table without blocking writers.
ALTER TABLE push.device_tokens ADD COLUMN IF NOT EXISTS webpush_p256dh text NULL;

ALTER TABLE push.device_tokens ADD COLUMN IF NOT EXISTS webpush_auth text NULL;

ALTER TABLE push.device_tokens ADD COLUMN IF NOT EXISTS webpush_vapid_key text NULL;

ALTER TABLE push.device_tokens DROP CONSTRAINT IF EXISTS device_tokens_platform_check;

ALTER TABLE push.device_tokens
    ADD CONSTRAINT device_tokens_platform_check CHECK (platform IN ('apns', 'fcm', 'webpush')) NOT VALID;

ALTER TABLE push.device_tokens VALIDATE CONSTRAINT device_tokens_platform_check;

ALTER TABLE push.device_tokens DROP CONSTRAINT IF EXISTS device_tokens_webpush_keys_check;

ALTER TABLE push.device_tokens
    ADD CONSTRAINT device_tokens_webpush_keys_check
    CHECK (platform <> 'webpush' OR (webpush_p256dh IS NOT NULL AND webpush_auth IS NOT NULL)) NOT VALID;

ALTER TABLE push.device_tokens VALIDATE CONSTRAINT device_tokens_webpush_keys_check;
