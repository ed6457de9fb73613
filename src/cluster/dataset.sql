-- plbbench dataset: a TPC-H-like `orders` and `lineitem`, generated inside
-- PostgreSQL (design.md §3). Every value is a hash of (row key, column salt,
-- seed) through hashint8extended, so the data depends only on the seed and
-- the scale, not on execution order, parallelism or the server's PRNG.
-- Placeholders, substituted by src/cluster/dataset.rs: {{orders}} (row count
-- of orders = 1,500,000 x scale), {{customers}}, {{parts}}, {{suppliers}},
-- {{seed}}. Statements end with `;` at the end of a line; each runs alone.
DROP TABLE IF EXISTS lineitem;
DROP TABLE IF EXISTS orders;
-- pb_u: uniform in [0, 1) from a key and a salt; pb_i: integer in [lo, hi].
CREATE OR REPLACE FUNCTION pb_u(n bigint, salt int) RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT (hashint8extended(n * 64 + salt, {{seed}}) & 2147483647)::double precision / 2147483648.0 $$;
CREATE OR REPLACE FUNCTION pb_i(n bigint, salt int, lo int, hi int) RETURNS int LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT lo + floor(pb_u(n, salt) * (hi - lo + 1))::int $$;
CREATE TABLE orders (
    o_orderkey      bigint        NOT NULL,
    o_custkey       int           NOT NULL,
    o_orderstatus   char(1)       NOT NULL,
    o_totalprice    numeric(15,2) NOT NULL,
    o_orderdate     date          NOT NULL,
    o_orderpriority text          NOT NULL,
    o_shippriority  int           NOT NULL,
    o_comment       text          NOT NULL
);
CREATE TABLE lineitem (
    l_orderkey      bigint        NOT NULL,
    l_linenumber    int           NOT NULL,
    l_partkey       int           NOT NULL,
    l_suppkey       int           NOT NULL,
    l_quantity      numeric(15,2) NOT NULL,
    l_extendedprice numeric(15,2) NOT NULL,
    l_discount      numeric(15,2) NOT NULL,
    l_tax           numeric(15,2) NOT NULL,
    l_returnflag    char(1)       NOT NULL,
    l_linestatus    char(1)       NOT NULL,
    l_shipdate      date          NOT NULL,
    l_commitdate    date          NOT NULL,
    l_receiptdate   date          NOT NULL,
    l_shipinstruct  text          NOT NULL,
    l_shipmode      text          NOT NULL,
    l_comment       text          NOT NULL
);
-- 1 to 7 lines per order (4 on average); order dates uniform over
-- 1992-01-01 .. 1998-08-02; TPC-H's rules for prices, dates and flags.
INSERT INTO lineitem
SELECT k, n, partkey,
       1 + (partkey + n * ({{suppliers}} / 4 + 1)) % {{suppliers}},
       qty,
       round(qty * (90000 + ((partkey / 10) % 20001) + 100 * (partkey % 1000)) / 100.0, 2),
       disc, tax,
       CASE WHEN receipt <= DATE '1995-06-17'
            THEN CASE WHEN pb_u(key, 8) < 0.5 THEN 'R' ELSE 'A' END
            ELSE 'N' END,
       CASE WHEN ship > DATE '1995-06-17' THEN 'O' ELSE 'F' END,
       ship, commitd, receipt,
       (ARRAY['DELIVER IN PERSON', 'COLLECT COD', 'NONE', 'TAKE BACK RETURN'])[pb_i(key, 9, 1, 4)],
       (ARRAY['REG AIR', 'AIR', 'RAIL', 'SHIP', 'TRUCK', 'MAIL', 'FOB'])[pb_i(key, 10, 1, 7)],
       left(md5(key::text || ':l{{seed}}'), pb_i(key, 11, 10, 32))
FROM (
    SELECT k, n, key, partkey, qty, disc, tax, ship, commitd,
           ship + pb_i(key, 7, 1, 30) AS receipt
    FROM (
        SELECT o.k, l.n, o.k * 8 + l.n AS key,
               pb_i(o.k * 8 + l.n, 2, 1, {{parts}}) AS partkey,
               pb_i(o.k * 8 + l.n, 3, 1, 50)::numeric AS qty,
               (pb_i(o.k * 8 + l.n, 4, 0, 10) / 100.0)::numeric(15,2) AS disc,
               (pb_i(o.k * 8 + l.n, 5, 0, 8) / 100.0)::numeric(15,2) AS tax,
               o.od + pb_i(o.k * 8 + l.n, 6, 1, 121) AS ship,
               o.od + pb_i(o.k * 8 + l.n, 12, 30, 90) AS commitd
        FROM (SELECT k, DATE '1992-01-01' + pb_i(k, 0, 0, 2405) AS od
              FROM generate_series(1::bigint, {{orders}}) AS k) AS o
        CROSS JOIN LATERAL generate_series(1, pb_i(o.k, 1, 1, 7)) AS l(n)
    ) AS a
) AS b;
INSERT INTO orders
SELECT l_orderkey,
       pb_i(l_orderkey, 20, 1, {{customers}}),
       CASE WHEN bool_and(l_linestatus = 'F') THEN 'F'
            WHEN bool_and(l_linestatus = 'O') THEN 'O'
            ELSE 'P' END,
       sum(round(l_extendedprice * (1 + l_tax) * (1 - l_discount), 2)),
       DATE '1992-01-01' + pb_i(l_orderkey, 0, 0, 2405),
       (ARRAY['1-URGENT', '2-HIGH', '3-MEDIUM', '4-NOT SPECIFIED', '5-LOW'])[pb_i(l_orderkey, 21, 1, 5)],
       0,
       left(md5(l_orderkey::text || ':o{{seed}}'), pb_i(l_orderkey, 22, 19, 32))
FROM lineitem
GROUP BY l_orderkey
ORDER BY l_orderkey;
ALTER TABLE orders ADD PRIMARY KEY (o_orderkey);
ALTER TABLE lineitem ADD PRIMARY KEY (l_orderkey, l_linenumber);
CREATE INDEX lineitem_l_shipdate ON lineitem (l_shipdate);
DROP FUNCTION pb_i(bigint, int, int, int);
DROP FUNCTION pb_u(bigint, int);
-- Frozen and all-visible: replicas never rewrite hint bits under load.
VACUUM (FREEZE, ANALYZE) orders;
VACUUM (FREEZE, ANALYZE) lineitem;
CHECKPOINT;
