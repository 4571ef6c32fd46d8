// Command vstreamreplay serves VStream responses recorded from the VTGate test server, so that a
// worker benchmark's source costs about what a real (Go) VTGate costs instead of Python gRPC's
// ~75-100 µs of CPU per response (BENCHMARKS.md, "Per-message cost of the gRPC serving path").
//
// The responses are the test server's own bytes: bench/streaming.py records one VStream of the
// test server (the request the worker will send) as gRPC length-prefixed messages. This command
// serves them over cleartext HTTP/2 (prior-knowledge h2c, standard library only) to every
// vtgateservice.Vitess/VStream call, then keeps the stream open, as VTGate does at the head of the
// binlog, until the client cancels. With -execute, every vtgateservice.Vitess/Execute call is
// answered with that file's recorded response (the Debezium connector validates its connection
// with one SHOW DATABASES before it streams); any other method answers UNIMPLEMENTED.
//
//	vstreamreplay [-interval DURATION] [-execute FILE] FILE
//
// prints {"address": "127.0.0.1:PORT"} and serves until its standard input is closed.
//
// With -interval the messages are released one at a time, message k at start + k*interval, as a
// VTGate streams a binlog that grows at a steady rate: the latency benchmark's source. Each stream
// then prints, once its last message is written, {"sent_ns": [...], "late_ns": [...]}: every
// message's release time (Unix ns, taken just before its write) and how late that was against its
// schedule, so the benchmark can time each transaction from its release.
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// chunk is how much is handed to the HTTP/2 writer per flush: like grpc-go's loopy writer, several
// queued messages go out in one write when the client keeps up.
const chunk = 64 << 10

func main() {
	interval := flag.Duration("interval", 0, "release one message per interval (0: as fast as the client reads)")
	executeFile := flag.String("execute", "", "a recorded Execute response (gRPC frame) to answer Execute calls with")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: vstreamreplay [-interval DURATION] [-execute FILE] FILE")
		os.Exit(2)
	}
	frames, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var execute []byte
	if *executeFile != "" {
		if execute, err = os.ReadFile(*executeFile); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: replay(frames, execute, *interval), Protocols: &protocols}
	out, _ := json.Marshal(map[string]string{"address": ln.Addr().String()})
	fmt.Println(string(out))
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func replay(frames, execute []byte, interval time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/grpc")
		if r.URL.Path == "/vtgateservice.Vitess/Execute" && execute != nil {
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				return
			}
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(execute)
			h.Set(http.TrailerPrefix+"Grpc-Status", "0")
			return
		}
		if r.URL.Path != "/vtgateservice.Vitess/VStream" {
			// A trailers-only response: the status travels in the headers.
			h.Set("Grpc-Status", "12")
			h.Set("Grpc-Message", "vstreamreplay serves VStream only")
			w.WriteHeader(http.StatusOK)
			return
		}
		if _, err := io.Copy(io.Discard, r.Body); err != nil { // the request: one message, then end of stream
			return
		}
		w.WriteHeader(http.StatusOK)
		flusher := w.(http.Flusher)
		if interval > 0 {
			if !paced(w, flusher, frames, interval) {
				return
			}
		} else {
			for off := 0; off < len(frames); off += chunk {
				end := min(off+chunk, len(frames))
				if _, err := w.Write(frames[off:end]); err != nil {
					return
				}
				flusher.Flush()
			}
		}
		<-r.Context().Done()
	}
}

// paced writes message k of frames at start + k*interval and prints every message's release time.
func paced(w io.Writer, flusher http.Flusher, frames []byte, interval time.Duration) bool {
	var sent, late []int64
	start := time.Now()
	for off, k := 0, 0; off < len(frames); k++ {
		end := off + 5 + int(binary.BigEndian.Uint32(frames[off+1:off+5])) // gRPC prefix: flag, length
		due := start.Add(time.Duration(k) * interval)
		time.Sleep(time.Until(due))
		now := time.Now()
		sent = append(sent, now.UnixNano())
		late = append(late, int64(now.Sub(due)))
		if _, err := w.Write(frames[off:end]); err != nil {
			return false
		}
		flusher.Flush()
		off = end
	}
	out, _ := json.Marshal(map[string][]int64{"sent_ns": sent, "late_ns": late})
	fmt.Println(string(out))
	return true
}
