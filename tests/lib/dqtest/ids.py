"""Generated job ids: 26 characters of Crockford base32, the first 10 the 48-bit due time in ms."""

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
CROCKFORD_VALUE = {c: i for i, c in enumerate(CROCKFORD)}


def id_time_ms(job_id):
    """The 48-bit timestamp of a generated id (its first 10 characters); bytes or str."""
    if isinstance(job_id, bytes):
        job_id = job_id.decode("ascii")
    v = 0
    for ch in job_id[:10]:
        v = v * 32 + CROCKFORD.index(ch)
    return v


def shard_of_generated(job_id, shards):
    """The shard of a sharded queue that holds a generated id's job: K[6], its first random byte
    (characters 10-17 hold bytes 6-10), modulo the shard count (src/queue/model/shards.h)."""
    if isinstance(job_id, bytes):
        job_id = job_id.decode("ascii")
    v = 0
    for ch in job_id[10:18]:
        v = v * 32 + CROCKFORD.index(ch)
    return (v >> 32) % shards
