// swift-tools-version: 6.0
import PackageDescription

// The folders follow the flow of data: a source (FakeCloudKit, later CloudKitWebServices) yields
// change pages, the engine (ZoneFeed) drives them zone by zone, the destination (ZoneFeedPostgres)
// applies each batch and its token atomically. CloudKitModel is the record vocabulary they share;
// it has no dependencies so that the engine knows neither HTTP nor libpq. Each component reads its
// own section of the pipeline file; the engine only reads the file's structure.
let package = Package(
    name: "zonefeed",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "zonefeed", targets: ["zonefeed"]),
        .library(name: "ZoneFeed", targets: ["ZoneFeed"]),
        .library(name: "ZoneFeedPostgres", targets: ["ZoneFeedPostgres"]),
        .library(name: "FakeCloudKit", targets: ["FakeCloudKit"]),
        .library(name: "FakeCloudKitServer", targets: ["FakeCloudKitServer"]),
        .library(name: "LibPQ", targets: ["LibPQ"]),
        .library(name: "CloudKitWebServices", targets: ["CloudKitWebServices"]),
        // For FuzzTesting/, which reads a page with CloudKitModel's JSONReader, a schema file
        // alone, and a pipeline file with the program's components.
        .library(name: "CloudKitModel", targets: ["CloudKitModel"]),
        .library(name: "CloudKitSchema", targets: ["CloudKitSchema"]),
        .library(name: "ZoneFeedComponents", targets: ["ZoneFeedComponents"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.0.0"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.20.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.0.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.60.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.27.0"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.0.0"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.0.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.0.0"),
        // Hummingbird's own dependency, named for the request parts a listener's handler reads.
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.34.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        .package(url: "https://github.com/swiftlang/swift-subprocess", from: "1.0.0"),
        .package(url: "https://github.com/apple/swift-system", from: "1.4.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.1.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CLibPQ",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"]), .brew(["libpq"])]
        ),
        .target(name: "LibPQ", dependencies: ["CLibPQ"]),
        .target(name: "CloudKitModel"),
        // The CloudKit Schema Language (`.ckdb`, what `cktool export-schema` writes): read alone.
        .target(name: "CloudKitSchema"),
        // The REST client, usable on its own: it knows CloudKit's endpoints, not the engine.
        .target(
            name: "CloudKitWebServices",
            dependencies: [
                "CloudKitModel",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // A run's metrics in Prometheus' conventions for batch jobs: a textfile and a Pushgateway.
        .target(
            name: "ZoneFeedMetrics",
            dependencies: [
                "ZoneFeed",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The client as the engine's ChangeSource.
        .target(
            name: "ZoneFeedCloudKit",
            dependencies: [
                "ZoneFeed", "CloudKitWebServices",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "ZoneFeed",
            dependencies: [
                "CloudKitModel",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Yams", package: "Yams"),
            ]
        ),
        .target(
            name: "FakeCloudKit",
            dependencies: ["CloudKitModel", "ZoneFeed", .product(name: "Logging", package: "swift-log")]
        ),
        .target(
            name: "FakeCloudKitServer",
            dependencies: [
                "FakeCloudKit", "CloudKitModel", "ZoneFeed",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // A private PostgreSQL cluster (initdb, pg_ctl, psql): support for `url: embedded` and the
        // tests, not the flow, so it is a module of its own and knows no libpq.
        .target(
            name: "EmbeddedPostgresServer",
            dependencies: [
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Subprocess", package: "swift-subprocess"),
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        // How record types become tables and fields columns, and the policies for what the
        // mapping does not foresee: the vocabulary any destination that writes tables shares.
        // Each destination brings its own column types and naming rules.
        .target(name: "RecordMapping", dependencies: ["ZoneFeed"]),
        .target(
            name: "ZoneFeedPostgres",
            dependencies: [
                "LibPQ", "ZoneFeed", "CloudKitModel", "CloudKitSchema", "EmbeddedPostgresServer", "RecordMapping",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The component list of the zonefeed program: what a pipeline file may name.
        .target(
            name: "ZoneFeedComponents",
            dependencies: ["ZoneFeed", "ZoneFeedCloudKit", "FakeCloudKit", "ZoneFeedPostgres", "ZoneFeedMetrics"]
        ),
        // The benchmark and PostgreSQL's own COPY ceiling: support, not the flow.
        .target(
            name: "ZoneFeedBench",
            dependencies: [
                "ZoneFeed", "ZoneFeedComponents", "ZoneFeedPostgres", "FakeCloudKit", "LibPQ", "CloudKitModel",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Subprocess", package: "swift-subprocess"),
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        // The commands, as a library: the program below runs them with its components, and a test
        // runs them with components of its own (a destination registered only there).
        .target(
            name: "ZoneFeedCommandLine",
            dependencies: [
                "ZoneFeed", "ZoneFeedComponents", "ZoneFeedPostgres", "EmbeddedPostgresServer", "FakeCloudKit",
                "ZoneFeedCloudKit", "CloudKitWebServices", "FakeCloudKitServer", "ZoneFeedBench", "ZoneFeedMetrics", "LibPQ", "CloudKitModel",
                "CloudKitSchema",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Subprocess", package: "swift-subprocess"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "zonefeed",
            dependencies: ["ZoneFeedCommandLine"]
        ),
        .target(
            name: "TestSupport",
            dependencies: [
                "LibPQ", "ZoneFeedPostgres", "EmbeddedPostgresServer", "ZoneFeed", "ZoneFeedComponents", "FakeCloudKit",
                "FakeCloudKitServer", "CloudKitModel",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Subprocess", package: "swift-subprocess"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            path: "Tests/TestSupport"
        ),
        .testTarget(
            name: "ZoneFeedTests",
            dependencies: [
                "ZoneFeed", "ZoneFeedCloudKit", "ZoneFeedPostgres", "ZoneFeedComponents", "ZoneFeedMetrics", "FakeCloudKit", "CloudKitModel",
                "TestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(name: "LibPQTests", dependencies: ["LibPQ", "TestSupport"]),
        .testTarget(
            name: "EmbeddedPostgresServerTests",
            dependencies: ["EmbeddedPostgresServer", .product(name: "Logging", package: "swift-log")]
        ),
        .testTarget(name: "CloudKitSchemaTests", dependencies: ["CloudKitSchema"], exclude: ["Schemas"]),
        .testTarget(name: "CloudKitModelTests", dependencies: ["CloudKitModel"]),
        .testTarget(
            name: "CloudKitWebServicesTests",
            dependencies: [
                "CloudKitWebServices", "ZoneFeedCloudKit", "ZoneFeed", "CloudKitModel", "FakeCloudKit", "TestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .testTarget(
            name: "FakeCloudKitServerTests",
            dependencies: [
                "FakeCloudKitServer", "FakeCloudKit", "CloudKitModel", "TestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "ZoneFeedPostgresTests",
            dependencies: ["ZoneFeedPostgres", "ZoneFeed", "FakeCloudKit", "LibPQ", "TestSupport", "CloudKitModel"]
        ),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "zonefeed", "ZoneFeedCommandLine", "ZoneFeedBench", "TestSupport", "FakeCloudKit", "FakeCloudKitServer", "ZoneFeed", "LibPQ",
                "CloudKitModel",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
    ]
)
