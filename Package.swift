// swift-tools-version: 6.0
import PackageDescription

// The folders follow the flow of data: a source (FakeCloudKit, later CloudKitWebServices) yields
// change pages, the engine (ZoneFeed) drives them zone by zone, the destination (ZoneFeedPostgres)
// applies each batch and its token atomically. CloudKitModel is the record vocabulary they share;
// it has no dependencies so that the engine knows neither HTTP nor libpq.
let package = Package(
    name: "zonefeed",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "zonefeed", targets: ["zonefeed"]),
        .library(name: "ZoneFeed", targets: ["ZoneFeed"]),
        .library(name: "ZoneFeedPostgres", targets: ["ZoneFeedPostgres"]),
        .library(name: "FakeCloudKit", targets: ["FakeCloudKit"]),
        .library(name: "LibPQ", targets: ["LibPQ"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.0.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CLibPQ",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"]), .brew(["libpq"])]
        ),
        .target(name: "LibPQ", dependencies: ["CLibPQ"]),
        .target(name: "CloudKitModel"),
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
            dependencies: ["CloudKitModel", "ZoneFeed"]
        ),
        .target(
            name: "ZoneFeedPostgres",
            dependencies: [
                "LibPQ", "ZoneFeed", "CloudKitModel",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "zonefeed",
            dependencies: [
                "ZoneFeed", "ZoneFeedPostgres", "FakeCloudKit",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "TestSupport",
            dependencies: ["LibPQ", "ZoneFeedPostgres", "ZoneFeed", "FakeCloudKit"],
            path: "Tests/TestSupport"
        ),
        .testTarget(name: "ZoneFeedTests", dependencies: ["ZoneFeed", "FakeCloudKit", "CloudKitModel"]),
        .testTarget(name: "LibPQTests", dependencies: ["LibPQ", "TestSupport"]),
        .testTarget(
            name: "ZoneFeedPostgresTests",
            dependencies: ["ZoneFeedPostgres", "ZoneFeed", "FakeCloudKit", "LibPQ", "TestSupport"]
        ),
        .testTarget(
            name: "EndToEndTests",
            dependencies: ["zonefeed", "TestSupport", "FakeCloudKit", "ZoneFeed", "LibPQ"]
        ),
    ]
)
