// deferq through redigo (Debian's golang-github-gomodule-redigo-dev, 1.8) with its default
// settings first: RESP2, no read timeout unless one is set. Commands go through conn.Do(...);
// blocking ones with redis.DoWithTimeout; pipelines through Send/Flush/Receive and transactions
// through Send("MULTI") ... Do("EXEC"). redigo has no INFO parser: INFO comes back as text.
//
//	DEFERQ_PORT=P ./test_redigo     (built by run_clients.sh, offline:
//	GOPATH=/usr/share/gocode GO111MODULE=off go build -o test_redigo test_redigo.go)
//
// Each test uses its own queue. Prints one line per test, then "N passed, M failed"; exits
// non-zero on any failure.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

var (
	addr       = "127.0.0.1:" + os.Getenv("DEFERQ_PORT")
	idRE       = regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{26}$`) // 26 characters of Crockford base32
	defaultTTL = int64(86400)
)

// failure is what a check panics with; the runner reports it.
type failure string

func check(ok bool, format string, args ...interface{}) {
	if !ok {
		msg := fmt.Sprintf(format, args...)
		if len(msg) > 400 {
			msg = msg[:400]
		}
		panic(failure(msg))
	}
}

func must(v interface{}, err error) interface{} {
	check(err == nil, "error: %v", err)
	return v
}

func allBytes() []byte { // every byte value, NUL and CR LF too
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func queueName(tag string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "redigo-" + tag + "-" + hex.EncodeToString(b)
}

func connect() redis.Conn {
	c, err := redis.Dial("tcp", addr)
	check(err == nil, "dial: %v", err)
	conns = append(conns, c)
	return c
}

var conns []redis.Conn

// show prints a reply with its bulk strings as quoted text.
func show(v interface{}) string {
	switch v := v.(type) {
	case []byte:
		return fmt.Sprintf("%q", v)
	case []interface{}:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = show(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	default:
		return fmt.Sprint(v)
	}
}

func str(v interface{}) string { return string(must(redis.Bytes(v, nil)).([]byte)) }

// checkJob: a job is [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms] (docs/commands.md).
func checkJob(reply interface{}, queue, id string, payload []byte, triesLeft, ttl, attempt int64) {
	job, ok := reply.([]interface{})
	check(ok && len(job) == 7, "%s: [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms]", show(reply))
	check(str(job[0]) == queue && str(job[1]) == id, "queue and id of %s", show(reply))
	check(bytes.Equal(must(redis.Bytes(job[2], nil)).([]byte), payload), "payload of %s", show(reply))
	ints := must(redis.Int64s(job[3:], nil)).([]int64)
	check(ints[0] == triesLeft, "tries_left of %s", show(reply))
	check(ints[1] > ttl-10 && ints[1] <= ttl, "ttl_left_s of %s", show(reply))
	check(ints[2] == attempt, "attempt of %s", show(reply))
	check(ints[3] >= 0 && ints[3] < 60000, "elapsed_ms of %s", show(reply))
}

func qstat(c redis.Conn, q string) map[string]int64 {
	return must(redis.Int64Map(c.Do("QSTAT", q))).(map[string]int64)
}

type test struct {
	name string
	fn   func()
}

var tests = []test{
	{"the default handshake (RESP2): PING, INFO server", func() {
		c := connect()
		check(must(redis.String(c.Do("PING"))) == "PONG", "PING")
		info := must(redis.String(c.Do("INFO", "server"))).(string)
		check(strings.Contains(info, "deferq_version:"), "INFO server: %q", info)
	}},
	{"publish, consume, ack through Do", func() {
		c := connect()
		q := queueName("basic")
		id := must(redis.String(c.Do("PUBLISH", q, "hello redigo"))).(string)
		check(idRE.MatchString(id), "id %q", id)
		checkJob(must(c.Do("CONSUME", q, "TTR", 30)), q, id, []byte("hello redigo"), 0, defaultTTL, 1)
		check(must(c.Do("CONSUME", q)) == nil, "CONSUME of an empty queue answers nil")
		check(must(redis.Int(c.Do("ACK", q, id))) == 1, "ACK")
		check(must(redis.Int(c.Do("ACK", q, id))) == 0, "a second ACK")
		s := qstat(c, q)
		got := []int64{s["ready"], s["leased"], s["published_total"], s["consumed_total"], s["acked_total"]}
		check(reflect.DeepEqual(got, []int64{0, 0, 1, 1, 1}), "QSTAT %v", s)
	}},
	{"publish with options (PDELAY, TTL, TRIES, ID); a blocking CONSUME gets it when due", func() {
		c := connect()
		q := queueName("options")
		key := "order-" + q
		t0 := time.Now()
		id := must(redis.String(c.Do("PUBLISH", q, "later", "PDELAY", 300, "TTL", 600, "TRIES", 3, "ID", key)))
		check(id == key, "id %q", id)
		check(must(redis.String(c.Do("PUBLISH", q, "again", "ID", key))) == key, "idempotent publish")
		check(must(c.Do("CONSUME", q)) == nil, "not before its due time")
		job := must(redis.DoWithTimeout(c, 10*time.Second, "CONSUME", q, "TTR", 30, "TIMEOUT", 5))
		took := time.Since(t0)
		checkJob(job, q, key, []byte("later"), 2, 600, 1)
		check(took >= 250*time.Millisecond && took < 3*time.Second, "delivered after %v, due after 300ms", took)
		check(must(redis.Int(c.Do("ACK", q, key))) == 1, "ACK")
	}},
	{"CONSUME TIMEOUT on an empty queue answers nil after the timeout", func() {
		c := connect()
		t0 := time.Now()
		check(must(redis.DoWithTimeout(c, 5*time.Second, "CONSUME", queueName("timeout"), "TIMEOUT", "0.3")) == nil, "nil")
		took := time.Since(t0)
		check(took >= 250*time.Millisecond && took < 2*time.Second, "returned after %v", took)
	}},
	{"MULTI/EXEC of 3 publishes returns 3 ids and creates 3 jobs", func() {
		c := connect()
		q := queueName("multi")
		check(c.Send("MULTI") == nil, "send")
		check(c.Send("PUBLISH", q, "m1") == nil, "send")
		check(c.Send("PUBLISH", q, "m2", "TRIES", 2) == nil, "send")
		check(c.Send("PUBLISH", q, "m3") == nil, "send")
		ids := must(redis.Strings(c.Do("EXEC"))).([]string)
		check(len(ids) == 3, "EXEC answered %q", ids)
		for _, id := range ids {
			check(idRE.MatchString(id), "id %q", id)
		}
		check(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2], "distinct ids %q", ids)
		s := qstat(c, q)
		check(s["ready"] == 3 && s["published_total"] == 3, "QSTAT %v", s)
		jobs := must(redis.Values(c.Do("CONSUME", q, "COUNT", 10, "TTR", 30))).([]interface{})
		check(len(jobs) == 3, "%d jobs", len(jobs))
		for i, job := range jobs {
			checkJob(job, q, ids[i], []byte(fmt.Sprintf("m%d", i+1)), map[int]int64{1: 1}[i], defaultTTL, 1)
		}
		check(must(redis.Int(c.Do("ACK", q, ids[0], ids[1], ids[2]))) == 3, "ACK")
		check(must(redis.String(c.Do("PING"))) == "PONG", "PING after EXEC")
	}},
	{"a syntax error inside MULTI: EXEC answers EXECABORT, no job is created", func() {
		c := connect()
		q := queueName("execabort")
		check(c.Send("MULTI") == nil, "send")
		check(c.Send("PUBLISH", q, "a") == nil, "send")
		check(c.Send("PUBLISH", q, "b", "NOSUCHOPTION", 1) == nil, "send")
		check(c.Send("PUBLISH", q, "c") == nil, "send")
		// Do returns EXEC's reply, and as its error the first error among the replies it read.
		reply, err := c.Do("EXEC")
		abort, ok := reply.(redis.Error)
		check(ok && strings.HasPrefix(abort.Error(), "EXECABORT"), "EXEC answered %v", reply)
		check(err != nil && err.Error() == "ERR syntax error", "the queuing error: %v", err)
		s := qstat(c, q)
		check(s["ready"] == 0 && s["published_total"] == 0, "QSTAT %v", s)
		check(must(redis.String(c.Do("PING"))) == "PONG", "PING after EXECABORT")
	}},
	{"pipeline (Send, Flush, Receive): 50 publishes then 50 consumes, FIFO", func() {
		c := connect()
		q := queueName("pipe")
		for i := 0; i < 50; i++ {
			check(c.Send("PUBLISH", q, fmt.Sprintf("job-%d", i)) == nil, "send")
		}
		check(c.Flush() == nil, "flush")
		ids := make([]interface{}, 0, 51)
		ids = append(ids, q)
		for i := 0; i < 50; i++ {
			ids = append(ids, must(redis.String(c.Receive())))
		}
		for i := 0; i < 50; i++ {
			check(c.Send("CONSUME", q, "TTR", 30) == nil, "send")
		}
		check(c.Flush() == nil, "flush")
		for i := 0; i < 50; i++ {
			checkJob(must(c.Receive()), q, ids[i+1].(string), []byte(fmt.Sprintf("job-%d", i)), 0, defaultTTL, 1)
		}
		check(must(redis.Int(c.Do("ACK", ids...))) == 50, "ACK of 50")
	}},
	{"binary payload: all 256 byte values round-trip", func() {
		c := connect()
		q := queueName("bin")
		id := must(redis.String(c.Do("PUBLISH", q, allBytes()))).(string)
		checkJob(must(c.Do("CONSUME", q, "TTR", 30)), q, id, allBytes(), 0, defaultTTL, 1)
		check(must(redis.Int(c.Do("ACK", q, id))) == 1, "ACK")
	}},
	{"INFO queues (text; redigo has no parser): both queues (names with \":\") with their figures", func() {
		c := connect()
		queues := []string{queueName("info:a"), queueName("info:b")}
		for _, q := range queues {
			// Taken by a consumer waiting before it falls due, it records lateness (one nobody
			// waits for may be moved by a read instead: docs/metrics.md).
			id := must(redis.String(c.Do("PUBLISH", q, "due", "PDELAY", 300))).(string)
			checkJob(must(redis.DoWithTimeout(c, 10*time.Second, "CONSUME", q, "TTR", 30, "TIMEOUT", 4)),
				q, id, []byte("due"), 0, defaultTTL, 1)
			check(must(redis.Int(c.Do("ACK", q, id))) == 1, "ACK")
		}
		info := must(redis.String(c.Do("INFO", "queues"))).(string)
		entries := map[string]string{} // key -> value, split at the first ':' as clients do
		for _, line := range strings.Split(info, "\r\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
				entries[k] = v
			}
		}
		for _, q := range queues {
			key := "queue_default/" + strings.ReplaceAll(q, ":", "%3A") // one key per queue (docs/commands.md)
			check(strings.Contains(","+entries[key]+",", ",lateness_count=1,"), "%s in %q", key, info)
		}
	}},
	{"errors are redis.Error with the spec texts", func() {
		c := connect()
		_, err := c.Do("PUBLISH", "q", "x", "TRIES", 0)
		e, ok := err.(redis.Error)
		check(ok && e.Error() == "ERR value is not an integer or out of range", "error %v", err)
		check(must(redis.String(c.Do("PING"))) == "PONG", "PING")
	}},
}

func run(t test) (err interface{}) {
	defer func() {
		err = recover()
		for _, c := range conns {
			c.Close()
		}
		conns = nil
	}()
	timer := time.AfterFunc(20*time.Second, func() { // a hung test fails the whole program
		fmt.Printf("FAIL redigo: %s\n     timed out after 20 s\n", t.name)
		os.Exit(1)
	})
	defer timer.Stop()
	t.fn()
	return nil
}

func main() {
	if os.Getenv("DEFERQ_PORT") == "" {
		fmt.Fprintln(os.Stderr, "DEFERQ_PORT is not set")
		os.Exit(2)
	}
	passed, failed := 0, 0
	for _, t := range tests {
		if err := run(t); err != nil {
			failed++
			fmt.Printf("FAIL redigo: %s\n     %v\n", t.name, err)
		} else {
			passed++
			fmt.Printf("ok   redigo: %s\n", t.name)
		}
	}
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 || passed == 0 {
		os.Exit(1)
	}
}
