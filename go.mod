module github.com/httpretry/httpretry

go 1.25

require (
	github.com/hashicorp/go-cleanhttp v0.5.2
	github.com/jarcoal/httpmock v1.4.2
	github.com/stretchr/testify v1.11.1
)

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
