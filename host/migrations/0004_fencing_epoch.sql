-- The dataset's fencing epoch: exclusive recovery moves it on by one, and a publish that
-- carries an older epoch than the row holds is refused. Rows of datasets created before this
-- migration start at 0, as new ones do.

ALTER TABLE datasets
    ADD COLUMN fencing_epoch BIGINT NOT NULL DEFAULT 0 CHECK (fencing_epoch >= 0);
