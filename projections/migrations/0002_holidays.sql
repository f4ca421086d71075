-- Resources: the people holidays apply to, as upstream services last
-- described them. Holidays do not copy them: which resources a global or
-- country holiday affects is worked out at query time, so a resource that
-- joins, leaves, moves country or becomes a guest changes every holiday at
-- once without a holiday event.
CREATE TABLE resources (
    workspace_id text    NOT NULL,
    id           text    NOT NULL,
    name         text    NOT NULL,
    country_code text    NOT NULL, -- '' when the resource has no country
    is_active    boolean NOT NULL,
    is_guest     boolean NOT NULL,
    seq          bigint  NOT NULL, -- log position of the last upsert applied
    PRIMARY KEY (workspace_id, id)
);

-- Only active non-guest resources are ever in a holiday's scope, so only
-- they are indexed: global holidays read a workspace's, country holidays a
-- country's.
CREATE INDEX resources_in_scope ON resources (workspace_id, country_code) WHERE is_active AND NOT is_guest;

-- Holidays. Everything but the reason is fixed at creation.
CREATE TABLE holidays (
    workspace_id text   NOT NULL,
    id           uuid   NOT NULL,
    reason       text   NOT NULL,
    type         text   NOT NULL, -- global, people or country
    date_from    date,            -- nullable as in the public DTO; a holiday without both has no days
    date_to      date,
    country_ids  text[] NOT NULL DEFAULT '{}', -- country holidays
    resource_ids text[] NOT NULL DEFAULT '{}', -- people holidays, in the order given
    created_seq  bigint NOT NULL,
    seq          bigint NOT NULL, -- log position of the last event applied
    PRIMARY KEY (workspace_id, id)
);

-- The list queries read one type of a workspace's holidays, by date.
CREATE INDEX holidays_by_type_date ON holidays (workspace_id, type, date_from);
