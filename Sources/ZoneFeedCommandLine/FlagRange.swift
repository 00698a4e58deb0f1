import ArgumentParser
import ZoneFeed

/// The ranges of numeric flags, checked in each command's `validate()`: a flag out of range is
/// a usage error (exit 2) before anything starts, as a pipeline file's number is refused at its
/// line, so that no conversion behind it can trap.
enum FlagRange {
    static func check(_ flag: String, _ value: Int, in range: ClosedRange<Int>, unit: String? = nil) throws {
        guard range.contains(value) else {
            throw ValidationError(
                "\(flag) must be \(unit.map { "a number of \($0)" } ?? "a whole number") from \(range.lowerBound.grouped) to \(range.upperBound.grouped), not \(value.grouped)"
            )
        }
    }

    static func check(_ flag: String, _ value: Double, in range: ClosedRange<Double>, unit: String? = nil) throws {
        guard range.contains(value) else {
            throw ValidationError(
                "\(flag) must be a number\(unit.map { " of \($0)" } ?? "") from \(bound(range.lowerBound)) to \(bound(range.upperBound)), not \(value)")
        }
    }

    private static func bound(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? Int(value).grouped : "\(value)"
    }
}
