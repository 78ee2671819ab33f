//! The examples at the end of the main commands' long help (`hero <command> --help`): each
//! runs as written against `hero up`.

pub const UP: &str = "\
Examples:
  hero up                          # a local Redis, the broker and two demo workers
  hero up --workers 4 --concurrency 8
  HERO_REDIS_URL=redis://10.0.0.5:6379 hero up --http off";

pub const BROKER: &str = "\
Examples:
  hero broker                                  # recovery, promotion, retention, HTTP on 127.0.0.1:7700
  hero broker --retention-secs 3600 --max-attempts 3
  hero broker --bridge hero:work_queue:w1=osis,both
  hero broker --http 0.0.0.0:7700 --http-token-file /etc/hero/token";

pub const WORKER: &str = "\
Examples:
  hero worker                                  # the built-in Rhai worker, 4 jobs at once
  hero worker --types rhai,osis --concurrency 16
  hero worker --group gpu --instance gpu-1     # takes gpu/gpu-1's jobs, then gpu's, then its types'";

pub const SUBMIT: &str = "\
Examples:
  hero submit '40 + 2'                         # prints the job id
  hero submit --type osis --priority 0 --retries 3 --file job.rhai
  hero submit --group gpu --instance gpu-1 --env MODEL=small 'run()'
  hero submit --delay 5m --tag nightly --unique report-2026-11 'report()'
  hero submit --after <id of a job> 'next_step()'";

pub const RUN: &str = "\
Examples:
  hero run '40 + 2'                            # prints 42
  hero run --wait 300 --file long.rhai         # exit 1 when the job ends in error";

pub const STATUS: &str = "\
Examples:
  hero status <id>
  hero status <id> --json                      # the whole record
  hero status <id> --history                   # and its events";

pub const JOBS: &str = "\
Examples:
  hero jobs --status error
  hero jobs --queue-type osis --queue-group gpu --limit 20
  hero jobs --tag nightly --json
  hero jobs --status finished --cursor <the cursor a page printed>";

pub const EVENTS: &str = "\
Examples:
  hero events -n 50
  hero events --follow --type osis
  hero events --job <id>
  hero events --event dead --queue osis/gpu";

pub const DEAD: &str = "\
Examples:
  hero dead list
  hero dead show <id>
  hero dead retry <id> <id>
  hero dead purge --all";

pub const QUEUE: &str = "\
Examples:
  hero queue set osis --timeout 5m --retries 3 --concurrency 10
  hero queue show
  hero queue clear osis";

pub const BATCH: &str = "\
Examples:
  hero submit --type osis --batch import-42 'load(1)'
  hero submit --type osis --batch import-42 'load(2)'
  hero batch close import-42 --on-complete 'report()' --type osis
  hero batch show import-42 --json
  hero batch list";

pub const CRON: &str = "\
Examples:
  hero cron add nightly '0 3 * * *' --type osis 'cleanup()'
  hero cron add heartbeat 'every 30s' 'ping()'
  hero cron list
  hero cron pause nightly";
