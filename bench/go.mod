module github.com/httpretry/httpretry/bench

go 1.25

require (
	github.com/PuerkitoBio/rehttp v1.4.0
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/hashicorp/go-cleanhttp v0.5.2
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/httpretry/httpretry v0.0.0
)

require (
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	github.com/google/go-cmp v0.6.0 // indirect
	github.com/influxdata/tdigest v0.0.1 // indirect
	golang.org/x/text v0.28.0 // indirect
	gonum.org/v1/gonum v0.16.0 // indirect
)

replace github.com/httpretry/httpretry => ../
