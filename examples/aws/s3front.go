package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// verifyUpload checks a request body as S3 does before it acts on it, and
// returns the payload to store. It is how the proxy proves that a retried
// upload still verifies: httpretry re-sends the bytes the SDK produced for
// the first attempt, so they must match the checksums and signature the SDK
// computed once, in its middleware, before the first attempt.
//
// Two encodings come from the SDK, depending on the endpoint's scheme (with
// RequestChecksumCalculation when_supported, what config.LoadDefaultConfig
// gives):
//
//   - HTTPS: Content-Encoding aws-chunked, x-amz-content-sha256
//     STREAMING-UNSIGNED-PAYLOAD-TRAILER, the payload in chunks and its
//     CRC32 in a trailer after the last chunk, computed while the SDK
//     streamed the body;
//   - plain HTTP: the payload as is, its SHA-256 signed in
//     x-amz-content-sha256 and its CRC32 in the x-amz-checksum-crc32
//     header, both computed by reading the body before sending it.
//
// checked says what was verified; code is S3's error code when a check
// failed, empty otherwise.
func verifyUpload(h http.Header, wire []byte) (payload []byte, checked, code string) {
	payload = wire
	var notes []string
	crc := h.Get("X-Amz-Checksum-Crc32")
	if strings.Contains(h.Get("Content-Encoding"), "aws-chunked") {
		var trailers map[string]string
		var err error
		payload, trailers, err = decodeAWSChunked(wire)
		if err != nil {
			return nil, "aws-chunked: " + err.Error(), "IncompleteBody"
		}
		if want := h.Get("X-Amz-Decoded-Content-Length"); want != "" && want != strconv.Itoa(len(payload)) {
			return nil, "decoded length " + strconv.Itoa(len(payload)) + ", want " + want, "IncompleteBody"
		}
		notes = append(notes, "aws-chunked")
		if v, ok := trailers["x-amz-checksum-crc32"]; ok {
			if v != crc32Base64(payload) {
				return nil, "CRC32 trailer mismatch", "BadDigest"
			}
			notes = append(notes, "CRC32 trailer ok")
		}
	}
	if sha := h.Get("X-Amz-Content-Sha256"); len(sha) == 64 {
		sum := sha256.Sum256(payload)
		if sha != hex.EncodeToString(sum[:]) {
			return nil, "signed SHA-256 mismatch", "XAmzContentSHA256Mismatch"
		}
		if len(payload) > 0 {
			notes = append(notes, "signed SHA-256 ok")
		}
	}
	if crc != "" {
		if crc != crc32Base64(payload) {
			return nil, "CRC32 header mismatch", "BadDigest"
		}
		notes = append(notes, "CRC32 header ok")
	}
	return payload, strings.Join(notes, ", "), ""
}

// crc32Base64 is the x-amz-checksum-crc32 value of b: the big-endian
// CRC-32 (IEEE), base64-encoded.
func crc32Base64(b []byte) string {
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32.ChecksumIEEE(b))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// decodeAWSChunked decodes an aws-chunked body: chunks of
// "hex-size[;chunk-signature=…]\r\n" data "\r\n", a zero-size chunk, then
// trailer lines "name:value\r\n" and an empty line.
func decodeAWSChunked(wire []byte) (payload []byte, trailers map[string]string, err error) {
	r := bufio.NewReader(bytes.NewReader(wire))
	var out bytes.Buffer
	for {
		line, err := readLine(r)
		if err != nil {
			return nil, nil, err
		}
		sizeHex, _, _ := strings.Cut(line, ";")
		size, err := strconv.ParseInt(sizeHex, 16, 64)
		if err != nil || size < 0 {
			return nil, nil, errors.New("bad chunk size " + strconv.Quote(line))
		}
		if size == 0 {
			break
		}
		if _, err := io.CopyN(&out, r, size); err != nil {
			return nil, nil, errors.New("short chunk")
		}
		if end, err := readLine(r); err != nil || end != "" {
			return nil, nil, errors.New("chunk not followed by CRLF")
		}
	}
	trailers = map[string]string{}
	for {
		line, err := readLine(r)
		if err != nil {
			return nil, nil, err
		}
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, nil, errors.New("bad trailer " + strconv.Quote(line))
		}
		trailers[strings.ToLower(strings.TrimSpace(name))] = strings.TrimSpace(value)
	}
	if _, err := r.ReadByte(); err != io.EOF {
		return nil, nil, errors.New("bytes after the trailer")
	}
	return out.Bytes(), trailers, nil
}

// readLine reads one CRLF-terminated line, without its CRLF.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", errors.New("truncated")
	}
	if !strings.HasSuffix(line, "\r\n") {
		return "", errors.New("line not ended by CRLF")
	}
	return strings.TrimSuffix(line, "\r\n"), nil
}
