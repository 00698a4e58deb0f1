import Benchmark
import PageToRowsWorkload

/// Per record (a scaled iteration is one record: 1,000 of them, five pages, per measurement).
let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.mallocCountTotal, .throughput, .wallClock], scalingFactor: .kilo, maxDuration: .seconds(3))
    for path in PageToRows.Path.allCases {
        Benchmark("page to rows, \(path.rawValue)") { benchmark in
            var workload = PageToRows(path: path)
            benchmark.startMeasurement()
            for i in benchmark.scaledIterations { workload.record(i) }
            benchmark.stopMeasurement()
            blackHole(workload.rowsWritten)
        }
    }
}
