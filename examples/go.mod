module github.com/httpretry/httpretry/examples

go 1.26.0

require (
	github.com/httpretry/httpretry v0.0.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
)

replace github.com/httpretry/httpretry => ../
