import sys
sys.path.insert(0, "/work/main/python/tests")
from test_duties import *

def test_dbg(deployment):
    url, start = deployment
    workers = [start() for _ in range(3)]
    ids = [f"d{n}" for n in range(60)]
    results = [duties_app.echo.apply_async((i,), countdown=1, id=i) for i in ids]
    assert [res.get(LIMIT) for res in results] == ids
    time.sleep(1)
    for w in workers:
        print(w.consumer, len(w.lines), w.lines[:5], [l for l in w.lines if not l.startswith("started")][:20])
    print(sorted(set(l for w in workers for l in w.lines))[:100])
    assert False
