// swift-tools-version:5.4
import PackageDescription

// libFuzzer targets for the readers of what comes from outside: a change page from the server, a
// pipeline file, a `.ckdb` schema file, a web auth token file. A package of its own, beside the
// main one, because every module it builds is instrumented (`-sanitize=fuzzer,address`) and
// each target's `main` is libFuzzer's; `./run` builds and runs them (see README.md).
//
// Tools version 5.4, as swift-protobuf's and swift-nio-http2's FuzzTesting, on purpose: from 5.5
// SwiftPM links an executable with `--defsym main=<Module>_main` (so that tests can link it),
// and a module built with `-parse-as-library` for libFuzzer has no such symbol: linking fails
// (swiftlang/swift#75800). Fuzzing is for Linux, so the package names no platforms.
let package = Package(
    name: "FuzzTesting",
    dependencies: [
        .package(name: "zonefeed", path: "..")
    ],
    targets: [
        .executableTarget(
            name: "FuzzPageDecoder",
            dependencies: [
                .product(name: "CloudKitModel", package: "zonefeed"),
                .product(name: "CloudKitWebServices", package: "zonefeed"),
                .product(name: "ZoneFeedPostgres", package: "zonefeed"),
            ]
        ),
        .executableTarget(
            name: "FuzzPipelineFile",
            dependencies: [
                .product(name: "ZoneFeed", package: "zonefeed"),
                .product(name: "ZoneFeedComponents", package: "zonefeed"),
            ]
        ),
        .executableTarget(
            name: "FuzzSchemaFile",
            dependencies: [
                .product(name: "CloudKitSchema", package: "zonefeed"),
                .product(name: "ZoneFeedPostgres", package: "zonefeed"),
            ]
        ),
        .executableTarget(
            name: "FuzzTokenFile",
            dependencies: [
                .product(name: "CloudKitWebServices", package: "zonefeed")
            ]
        ),
    ]
)
