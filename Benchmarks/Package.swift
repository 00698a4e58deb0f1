// swift-tools-version: 6.1
import PackageDescription

// The micro-benchmark of zonefeed's work per record: a page of the bench's records read from its
// bytes and written as COPY rows, with nothing else (no network, no PostgreSQL). A package of its
// own, beside the main one, so that the main package's build and tests never need
// ordo-one/benchmark; `./run` runs it (allocations per record with the benchmark's malloc
// counter, instructions per record with callgrind).
let package = Package(
    name: "Benchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "zonefeed", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark.git", exact: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .target(
            name: "PageToRowsWorkload",
            dependencies: [
                .product(name: "CloudKitModel", package: "zonefeed"),
                .product(name: "CloudKitWebServices", package: "zonefeed"),
                .product(name: "FakeCloudKit", package: "zonefeed"),
                .product(name: "FakeCloudKitServer", package: "zonefeed"),
                .product(name: "ZoneFeedPostgres", package: "zonefeed"),
            ]
        ),
        // For callgrind: `page-to-rows PATH RECORDS` does the work for that many records and exits.
        .executableTarget(
            name: "page-to-rows", dependencies: ["PageToRowsWorkload", .product(name: "FakeCloudKit", package: "zonefeed")]),
        .executableTarget(
            name: "PageToRows",
            dependencies: ["PageToRowsWorkload", .product(name: "Benchmark", package: "benchmark")],
            path: "Benchmarks/PageToRows",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ]
)
