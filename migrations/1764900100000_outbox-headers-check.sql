-- Up Migration

-- Headers reach the broker as strings (trace context, correlation ids), and the
-- relay turns every row into a message: a row whose headers are JSON null, an
-- array, or an object holding numbers or nested objects (written by SQL, not
-- through enqueueEvents) cannot become a message. Refuse such rows at write time.
--
-- jsonb_typeof and jsonb_path_exists (without the _tz suffix) are IMMUTABLE, so
-- the expression is fit for a CHECK without a helper function. `strict $.*`
-- yields the object's member values and the filter finds any that is not a
-- string; strict, because lax mode unwraps arrays ({"a":["b"]} would pass), and
-- silent, so a non-object gives NULL (then false through the AND), not an error.
--
-- Existing rows. A CHECK applies to every UPDATE of a row as well, so a bad row
-- left in place would make the relay's set-based outcome UPDATE fail for its
-- whole batch; the rows are therefore repaired, not merely grandfathered with
-- NOT VALID: headers that are not an object become '{}' (such a row never
-- became a message), non-string values of an object become their JSON text
-- (3 -> "3", the string form consumers are promised), JSON nulls are dropped.
-- The constraint is then added NOT VALID and
-- validated separately, which keeps the lock short when this file is run on
-- its own; the project's migrator runs all pending files in one transaction,
-- where the ACCESS EXCLUSIVE lock of ADD CONSTRAINT is held until commit, so on
-- a large table run it at a quiet time (cost: two sequential scans).
UPDATE outbox_events
SET headers = CASE
  WHEN jsonb_typeof(headers) <> 'object' THEN '{}'::jsonb
  ELSE (
    SELECT coalesce(
      jsonb_object_agg(
        key,
        CASE WHEN jsonb_typeof(value) = 'string' THEN value ELSE to_jsonb(value #>> '{}') END
      ) FILTER (WHERE jsonb_typeof(value) <> 'null'),
      '{}'::jsonb
    )
    FROM jsonb_each(headers)
  )
END
WHERE NOT (jsonb_typeof(headers) = 'object'
           AND NOT jsonb_path_exists(headers, 'strict $.* ? (@.type() != "string")', '{}', true));

ALTER TABLE outbox_events
  ADD CONSTRAINT outbox_events_headers_object_of_strings
  CHECK (jsonb_typeof(headers) = 'object'
         AND NOT jsonb_path_exists(headers, 'strict $.* ? (@.type() != "string")', '{}', true))
  NOT VALID;

ALTER TABLE outbox_events VALIDATE CONSTRAINT outbox_events_headers_object_of_strings;

-- Down Migration
ALTER TABLE outbox_events DROP CONSTRAINT IF EXISTS outbox_events_headers_object_of_strings;
