-- Patch markers (issue #16): `ctx.patched(..)` records the patches a run took as step
-- attempts of their own kind.
ALTER TABLE tasks.step_attempts DROP CONSTRAINT step_attempts_kind_check;
ALTER TABLE tasks.step_attempts ADD CONSTRAINT step_attempts_kind_check
    CHECK (kind IN ('function', 'sleep', 'event', 'child', 'patch'));
