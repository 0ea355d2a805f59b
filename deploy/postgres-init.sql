-- Run once by the postgres image on its first start (`docker compose --profile postgres up`):
-- the role finishline connects as, not a superuser, owning the database its schema goes in
-- (the replicas make and migrate the schema themselves). Change the password here and in
-- FINISHLINE_STORE_URL (docker-compose.yml) before the first start.
CREATE ROLE finishline LOGIN PASSWORD 'finishline' NOSUPERUSER NOCREATEDB NOCREATEROLE;
CREATE DATABASE finishline OWNER finishline;
