// Command vstreamclient is a minimal, dependency-free VStream client for the replay benchmark
// (bench/vtgatesim_replay.py --go-client): it shows how fast the VTGate test server serves when
// the client is not Python.
//
// It speaks gRPC over cleartext HTTP/2 with the standard library (prior-knowledge h2c), sends a
// pre-serialized VStreamRequest given in hex, reads length-prefixed VStreamResponse messages and
// walks their protobuf wire format just far enough to count events and row changes:
// VStreamResponse.events=1, VEvent.type=1, VEvent.row_event=5, RowEvent.row_changes=2. Every byte of
// every response is decoded to that depth, so a malformed response fails the run.
//
//	vstreamclient ADDR REQUEST_HEX ROWS
//
// prints {"rows","events","responses","seconds","client_cpu"} as JSON, like the Python client.
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"time"
)

const rowType = 12 // binlogdata.VEventType ROW

func varint(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * uint(i))
		if b[i] < 0x80 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errors.New("bad varint")
}

// fields calls fn for every field of a message; fn gets the varint value or the bytes.
func fields(b []byte, fn func(num int, v uint64, data []byte) error) error {
	for len(b) > 0 {
		key, n, err := varint(b)
		if err != nil {
			return err
		}
		b = b[n:]
		num, wt := int(key>>3), key&7
		switch wt {
		case 0:
			v, n, err := varint(b)
			if err != nil {
				return err
			}
			b = b[n:]
			if err := fn(num, v, nil); err != nil {
				return err
			}
		case 1:
			if len(b) < 8 {
				return errors.New("short fixed64")
			}
			b = b[8:]
		case 5:
			if len(b) < 4 {
				return errors.New("short fixed32")
			}
			b = b[4:]
		case 2:
			l, n, err := varint(b)
			if err != nil || uint64(len(b)-n) < l {
				return errors.New("bad length")
			}
			if err := fn(num, 0, b[n:n+int(l)]); err != nil {
				return err
			}
			b = b[n+int(l):]
		default:
			return fmt.Errorf("wire type %d", wt)
		}
	}
	return nil
}

// count returns (events, row changes) of one VStreamResponse.
func count(msg []byte) (int, int, error) {
	events, rows := 0, 0
	err := fields(msg, func(num int, _ uint64, data []byte) error {
		if num != 1 || data == nil {
			return nil
		}
		events++
		var typ uint64
		var rowEvent []byte
		if err := fields(data, func(n int, v uint64, d []byte) error {
			if n == 1 {
				typ = v
			} else if n == 5 {
				rowEvent = d
			}
			return nil
		}); err != nil {
			return err
		}
		if typ == rowType {
			return fields(rowEvent, func(n int, _ uint64, d []byte) error {
				if n == 2 {
					rows++
				}
				return nil
			})
		}
		return nil
	})
	return events, rows, err
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func run() error {
	if len(os.Args) != 4 {
		return errors.New("usage: vstreamclient ADDR REQUEST_HEX ROWS")
	}
	req, err := hex.DecodeString(os.Args[2])
	if err != nil {
		return err
	}
	want, err := strconv.Atoi(os.Args[3])
	if err != nil {
		return err
	}
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: protocols}}

	frame := make([]byte, 5, 5+len(req))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(req)))
	frame = append(frame, req...)
	hreq, err := http.NewRequest("POST", "http://"+os.Args[1]+"/vtgateservice.Vitess/VStream", bytes.NewReader(frame))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/grpc")
	hreq.Header.Set("TE", "trailers")

	c0 := cpuSeconds()
	t0 := time.Now()
	resp, err := client.Do(hreq)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	body := resp.Body
	var hdr [5]byte
	buf := make([]byte, 1<<20)
	rows, events, responses := 0, 0, 0
	for rows < want {
		if _, err := io.ReadFull(body, hdr[:]); err != nil {
			return fmt.Errorf("stream ended after %d rows (grpc-status %q %q): %w", rows,
				resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message"), err)
		}
		if hdr[0] != 0 {
			return errors.New("compressed message")
		}
		n := int(binary.BigEndian.Uint32(hdr[1:]))
		if n > len(buf) {
			buf = make([]byte, n)
		}
		if _, err := io.ReadFull(body, buf[:n]); err != nil {
			return err
		}
		e, r, err := count(buf[:n])
		if err != nil {
			return fmt.Errorf("response %d: %w", responses, err)
		}
		responses++
		events += e
		rows += r
	}
	seconds := time.Since(t0).Seconds()
	cpu := cpuSeconds() - c0
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"rows": rows, "events": events, "responses": responses, "seconds": seconds, "client_cpu": cpu,
	})
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "vstreamclient:", err)
		os.Exit(1)
	}
}
