module github.com/httpretry/httpretry

go 1.25

require github.com/hashicorp/go-cleanhttp v0.5.2
