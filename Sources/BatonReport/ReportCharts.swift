import Baton
import Foundation

/// The HTML page's charts, as inline SVG (no script, no external resource).
///
/// Each chart is drawn twice, in a wide frame for desktops and a narrow one for phones (about 360 units
/// across, so 12-unit text stays near 12 px), and the stylesheet shows the one that fits the screen:
/// scaling a 1,040-unit chart down to a phone would leave its labels 4 px high.
enum ReportCharts {
    private static func f(_ value: Double) -> String { String(format: "%.1f", value) }

    /// Which of the two drawings: `wide` or `narrow`, also the SVG's class.
    enum Frame: String, CaseIterable {
        case wide, narrow
    }

    /// The opening tag of a chart's SVG in `frame`.
    private static func open(_ frame: Frame, _ width: Double, _ height: Double, label: String) -> String {
        "<svg class=\"\(frame.rawValue)\" viewBox=\"0 0 \(Int(width)) \(Int(height))\" role=\"img\" aria-label=\"\(label)\">\n"
    }

    /// The width a character of the charts' 12-unit text is taken to need: 0.7 em, as wide as the bold lower-case
    /// letters and digits of DejaVu Sans (the sans-serif of a Debian browser, and among the widest), so a label placed
    /// by it ends inside its estimate.
    static let characterWidth = 8.4

    /// A `<text>` element of `content` anchored at `x` as `anchor` (`start`, `middle`, `end`), moved along x as
    /// little as needed to keep its estimated extent (``characterWidth`` per character) inside `lower...width`
    /// (the drawing, or the plot for a label within it), 2 units from each end: a label near an edge of the chart
    /// is never cut off.
    static func text(_ content: String, x: Double, y: Double, anchor: String = "start", within width: Double, from lower: Double = 0,
                     class name: String? = nil) -> String {
        let extent = Double(content.count) * characterWidth
        let before = anchor == "middle" ? extent / 2 : anchor == "end" ? extent : 0
        let start = min(max(x - before, lower + 2), width - 2 - extent)
        let placed = max(2, start) + before
        let attribute = name.map { " class=\"\($0)\"" } ?? ""
        return "<text x=\"\(f(placed))\" y=\"\(f(y))\" text-anchor=\"\(anchor)\"\(attribute)>\(content)</text>"
    }

    /// Cumulative share migrated against the days of the window: the actual line, the deadline, today, the
    /// projection at the current pace (dashed) and the pace needed to finish in time (dotted), both up to the share
    /// that can still migrate (users refused for good left out).
    static func progress(_ report: MigrationReport) -> String {
        guard report.window.acceptedAt != nil else { return "" }
        var html = Frame.allCases.map { progress(report, $0) }.joined()
        html += "<p class=\"legend\"><span><i class=\"migrated\"></i>migrated so far</span> "
        html += "<span>- - projection at the current pace</span> <span>&#183;&#183;&#183; pace needed to finish by day 60</span></p>\n"
        return html
    }

    private static func progress(_ report: MigrationReport, _ frame: Frame) -> String {
        guard let accepted = report.window.acceptedAt else { return "" }
        let (width, height, left, right, top, bottom) = frame == .wide
            ? (1040.0, 300.0, 52.0, 24.0, 24.0, 40.0) : (360.0, 240.0, 46.0, 22.0, 24.0, 34.0)
        let plotWidth = width - left - right, plotHeight = height - top - bottom
        let now = report.generatedAt
        let nowDay = now.timeIntervalSince(accepted) / 86_400
        let firstDay = report.perDay.first.map { ReportFormat.date(ofDay: $0.day).timeIntervalSince(accepted) / 86_400 } ?? 0
        let minX = min(0, firstDay.rounded(.down), nowDay.rounded(.down))
        let maxX = max(60, nowDay.rounded(.up))
        let total = Double(max(1, report.totals.total))
        func x(_ day: Double) -> Double { left + (day - minX) / (maxX - minX) * plotWidth }
        func y(_ share: Double) -> Double { top + (1 - min(1, max(0, share))) * plotHeight }
        // Labels of the axes within the drawing, the others within the plot.
        func label(_ content: String, _ x: Double, _ y: Double, _ anchor: String = "start", _ name: String? = nil, inPlot: Bool = true) -> String {
            text(content, x: x, y: y, anchor: anchor, within: width, from: inPlot ? left : 0, class: name)
        }

        var svg = open(frame, width, height, label: "share of users migrated over the 60-day window")
        for step in 0...4 {
            let share = Double(step) / 4
            svg += "<line x1=\"\(f(left))\" y1=\"\(f(y(share)))\" x2=\"\(f(width - right))\" y2=\"\(f(y(share)))\" stroke=\"#e4e7ec\"/>"
            svg += label("\(step * 25)%", left - 8, y(share) + 4, "end", inPlot: false) + "\n"
        }
        var tick = (minX / 10).rounded(.up) * 10
        while tick <= maxX {
            svg += label("day \(Int(tick))", x(tick), height - bottom + 18, "middle", inPlot: false) + "\n"
            tick += 10
        }

        // Actual: the cumulative count at the end of each day (today: now).
        var cumulative = 0
        var points = [(x(max(minX, firstDay)), y(0))]
        for day in report.perDay {
            cumulative += day.total
            let end = min(nowDay, ReportFormat.date(ofDay: day.day).timeIntervalSince(accepted) / 86_400 + 1)
            points.append((x(end), y(Double(cumulative) / total)))
        }
        let current = Double(report.totals.migrated) / total
        let line = points.map { "\(f($0.0)),\(f($0.1))" }.joined(separator: " ")
        if let last = points.last, let first = points.first {
            svg += "<polygon points=\"\(line) \(f(last.0)),\(f(y(0))) \(f(first.0)),\(f(y(0)))\" fill=\"#2e9d57\" fill-opacity=\"0.12\"/>\n"
        }
        svg += "<polyline points=\"\(line)\" fill=\"none\" stroke=\"#2e9d57\" stroke-width=\"2.5\"/>\n"

        // The share that can still be reached: everyone but the users refused for good.
        let reachable = Double(report.totals.total - report.totals.unresolvable) / total
        if report.totals.unresolvable > 0 {
            svg += "<line x1=\"\(f(left))\" y1=\"\(f(y(reachable)))\" x2=\"\(f(width - right))\" y2=\"\(f(y(reachable)))\" stroke=\"#c4413b\" stroke-opacity=\"0.5\"/>"
            svg += label("\(ReportFormat.count(report.totals.unresolvable)) refused for good", x(60) - 6, y(reachable) + 14, "end", "bad") + "\n"
        }
        // Needed pace: from today's share to the reachable share at day 60.
        if !report.window.closed, report.projection.remaining > 0 {
            svg += "<line x1=\"\(f(x(nowDay)))\" y1=\"\(f(y(current)))\" x2=\"\(f(x(60)))\" y2=\"\(f(y(reachable)))\" stroke=\"#667085\" stroke-width=\"1.5\" stroke-dasharray=\"2 4\"/>\n"
        }
        // Projection at the current pace, clipped to the chart.
        if report.projection.perDay > 0, report.projection.remaining > 0 {
            let perDayShare = report.projection.perDay / total
            let daysToFinish = max(0, reachable - current) / perDayShare
            let endDay = min(maxX, nowDay + daysToFinish)
            let endShare = current + (endDay - nowDay) * perDayShare
            let color = report.projection.status == .behind ? "#c4413b" : "#2e9d57"
            svg += "<line x1=\"\(f(x(nowDay)))\" y1=\"\(f(y(current)))\" x2=\"\(f(x(endDay)))\" y2=\"\(f(y(endShare)))\" stroke=\"\(color)\" stroke-width=\"2\" stroke-dasharray=\"7 5\"/>\n"
            if let finish = report.projection.finishAt, endDay < maxX {
                svg += "<circle cx=\"\(f(x(endDay)))\" cy=\"\(f(y(reachable)))\" r=\"4\" fill=\"\(color)\"/>"
                let nearDeadline = endDay > 60 - (maxX - minX) * 0.2
                let finishText = "projected finish \(ReportFormat.day(finish).dropFirst(5))"
                svg += label(finishText, x(endDay) + (nearDeadline ? -8 : 0), y(reachable) + (nearDeadline ? 18 : -8), nearDeadline ? "end" : "middle", "strong") + "\n"
            } else if report.projection.status == .behind {
                svg += label("\(ReportFormat.percent(endShare)) by day \(Int(maxX)) at this pace", x(endDay) - 6, y(endShare) + 16, "end", "bad") + "\n"
            }
        }

        // Deadline and today.
        svg += "<line x1=\"\(f(x(60)))\" y1=\"\(f(top))\" x2=\"\(f(x(60)))\" y2=\"\(f(y(0)))\" stroke=\"#c4413b\" stroke-width=\"2\"/>"
        svg += label("deadline (day 60)", x(60) - 6, top + 12, "end", "strong") + "\n"
        if nowDay < maxX - 0.5 || nowDay <= 60 {
            svg += "<line x1=\"\(f(x(nowDay)))\" y1=\"\(f(top))\" x2=\"\(f(x(nowDay)))\" y2=\"\(f(y(0)))\" stroke=\"#1d2330\" stroke-dasharray=\"3 3\"/>"
        }
        let anchor = nowDay > (maxX - minX) * 0.8 + minX ? "end" : "start"
        let dx = anchor == "end" ? -6.0 : 6.0
        svg += label("today: \(ReportFormat.percent(current))", x(nowDay) + dx, max(top + 28, y(current) - 10), anchor, "strong") + "\n"
        svg += "</svg>\n"
        return svg
    }

    /// One bar per method: the users it migrated, with the count.
    static func methods(_ report: MigrationReport) -> String {
        var html = Frame.allCases.map { methods(report, $0) }.joined()
        if report.totals.pending + report.totals.failed > 0 {
            html += "<p class=\"muted\">\(ReportFormat.count(report.totals.pending + report.totals.failed)) users are pending or failed: no method has carried them over yet.</p>\n"
        }
        return html
    }

    private static func methods(_ report: MigrationReport, _ frame: Frame) -> String {
        let (width, left, right) = frame == .wide ? (560.0, 80.0, 200.0) : (360.0, 76.0, 176.0)
        let rowHeight = 46.0, top = 8.0
        let height = top * 2 + rowHeight * Double(report.methods.count) + 24
        let peak = Double(max(1, report.methods.map(\.migrated).max() ?? 1))
        let plotWidth = width - left - right
        var svg = open(frame, width, height, label: "users migrated by method")
        for (index, outcome) in report.methods.enumerated() {
            let rowY = top + Double(index) * rowHeight
            svg += text(outcome.method.label, x: left - 10, y: rowY + 21, anchor: "end", within: width, class: "strong")
            svg += "<rect x=\"\(f(left))\" y=\"\(f(rowY + 6))\" width=\"\(f(plotWidth))\" height=\"22\" rx=\"4\" fill=\"#f0f2f5\"/>"
            if outcome.migrated > 0 {
                svg += "<rect x=\"\(f(left))\" y=\"\(f(rowY + 6))\" width=\"\(f(max(1.5, Double(outcome.migrated) / peak * plotWidth)))\" height=\"22\" fill=\"#2e9d57\"/>"
            }
            svg += text("\(ReportFormat.count(outcome.migrated)) migrated", x: width - right + 10, y: rowY + 21, within: width, class: "strong") + "\n"
        }
        svg += "</svg>\n"
        return svg
    }

    /// Migrations per day as bars stacked by method (the last 120 days at most).
    static func perDay(_ report: MigrationReport) -> String {
        let days = Array(report.perDay.suffix(120))
        var html = Frame.allCases.map { perDay(days, $0) }.joined()
        html += "<p class=\"legend\"><span><i class=\"signin\"></i>sign-in</span> <span><i class=\"exchange\"></i>exchange</span> <span><i class=\"link\"></i>link</span>"
        if report.perDay.count > days.count { html += " <span>(last \(days.count) days)</span>" }
        html += "</p>\n"
        return html
    }

    private static func perDay(_ days: [MigrationReport.DayCount], _ frame: Frame) -> String {
        let (width, height, left, right) = frame == .wide ? (1040.0, 260.0, 60.0, 16.0) : (360.0, 200.0, 44.0, 8.0)
        let top = 16.0, bottom = 40.0
        let plotWidth = width - left - right, plotHeight = height - top - bottom
        let peak = niceStep(Double(max(4, days.map(\.total).max() ?? 4)) / 4) * 4
        let slot = plotWidth / Double(max(1, days.count))
        let barWidth = max(1, slot * 0.72)
        func y(_ value: Double) -> Double { top + (1 - value / peak) * plotHeight }

        var svg = open(frame, width, height, label: "migrations per day by method")
        for step in 0...4 {
            let value = peak * Double(step) / 4
            svg += "<line x1=\"\(f(left))\" y1=\"\(f(y(value)))\" x2=\"\(f(width - right))\" y2=\"\(f(y(value)))\" stroke=\"#e4e7ec\"/>"
            svg += text(ReportFormat.count(Int(value.rounded())), x: left - 8, y: y(value) + 4, anchor: "end", within: width) + "\n"
        }
        // At most ten day labels, each about 44 units wide.
        let labelEvery = max(1, Int((Double(days.count) / 10).rounded(.up)), Int((Double(days.count) * 44 / plotWidth).rounded(.up)))
        for (index, day) in days.enumerated() {
            let barX = left + Double(index) * slot + (slot - barWidth) / 2
            var base = 0.0
            for (count, color) in [(day.signin, "#2f6fde"), (day.exchange, "#8e5bd8"), (day.link, "#1a9e8f")] where count > 0 {
                let top = y(base + Double(count))
                svg += "<rect x=\"\(f(barX))\" y=\"\(f(top))\" width=\"\(f(barWidth))\" height=\"\(f(y(base) - top))\" fill=\"\(color)\"><title>\(day.day): \(ReportFormat.count(count))</title></rect>"
                base += Double(count)
            }
            if index % labelEvery == 0 {
                svg += text(String(day.day.dropFirst(5)), x: barX + barWidth / 2, y: height - bottom + 18, anchor: "middle", within: width)
            }
            svg += "\n"
        }
        svg += "</svg>\n"
        return svg
    }

    /// The smallest of 1, 2 or 5 times a power of ten at or above `value`: a gridline step.
    private static func niceStep(_ value: Double) -> Double {
        let magnitude = pow(10, (log10(value)).rounded(.down))
        for factor in [1.0, 2, 5, 10] where factor * magnitude >= value {
            return factor * magnitude
        }
        return 10 * magnitude
    }
}
