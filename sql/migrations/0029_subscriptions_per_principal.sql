-- resources/subscribe kept per session AND principal: a caller who learns another session's id
-- can no longer claim its URIs first (the other's later subscribe found the row taken and was
-- silently dropped). Each principal's rows under a session id are its own; the stream of a session
-- follows only its own principal's rows (app/store/subscriptions.py).
ALTER TABLE engram.resource_subscriptions DROP CONSTRAINT resource_subscriptions_pkey;
ALTER TABLE engram.resource_subscriptions ADD PRIMARY KEY (session_id, principal, uri);
