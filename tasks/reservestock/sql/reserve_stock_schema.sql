-- reserve-stock in PostgreSQL (DATABASE_URL set): the SKU's totals, and one row per applied order,
-- keyed by the order's identity (tenant, order id): an order is applied once, on one sku, ever.
-- The orders table is also the ledger.
CREATE TABLE IF NOT EXISTS reserve_stock (
    tenant        text   NOT NULL,
    sku           text   NOT NULL,
    reserved      bigint NOT NULL DEFAULT 0,
    orders        bigint NOT NULL DEFAULT 0,
    fencing_token bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, sku)
);
CREATE TABLE IF NOT EXISTS reserve_stock_orders (
    tenant        text        NOT NULL,
    order_id      text        NOT NULL,
    sku           text        NOT NULL,
    quantity      integer     NOT NULL,
    job_id        text        NOT NULL,
    fencing_token bigint      NOT NULL,
    applied_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, order_id)
);
-- Orders placed through POST /orders: recorded with their job in one transaction (the outbox).
CREATE TABLE IF NOT EXISTS reserve_stock_requests (
    tenant     text        NOT NULL,
    order_id   text        NOT NULL,
    sku        text        NOT NULL,
    quantity   integer     NOT NULL,
    job_id     text        NOT NULL,
    placed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, order_id)
);
