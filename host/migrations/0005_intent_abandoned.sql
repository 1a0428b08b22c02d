-- Intent format 2 adds the phase `abandoned`: recovery fences an `Armed` intent whose owner's
-- lease ran out before it confirmed, so that its owner can never confirm or publish it, then
-- marks its staged rows and deletes it. The phase column's CHECK constraint (named by
-- Postgres after the column, as 0002 declared it inline) must allow the new name.

ALTER TABLE intents DROP CONSTRAINT intents_phase_check;
ALTER TABLE intents
    ADD CONSTRAINT intents_phase_check
    CHECK (phase IN ('armed', 'effects_confirmed', 'abandoned'));
