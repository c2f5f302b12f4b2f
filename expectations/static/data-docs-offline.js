/*
 * Data Docs without a CDN: the parts of bootstrap-table that Great Expectations' pages call,
 * and Bootstrap 4's data attributes for the Bootstrap 5 build served beside this file.
 *
 * $(table).bootstrapTable({columns, data, sortName, sortOrder, rowAttributes, rowStyle, search,
 * toolbar}) renders the rows (cell values are HTML written by Great Expectations), sorted by
 * the column's sortName (or field), with a search box in the toolbar; a click on a row
 * triggers "click-row.bs.table" (row, $tr) as bootstrap-table does. Method calls
 * ($(table).bootstrapTable("resetSearch"), ...) clear the search box.
 */
(function ($) {
  "use strict";
  if (!$) {
    return;
  }

  function named(option) {
    return typeof option === "function" ? option : window[option];
  }

  function compare(a, b) {
    if (a === b) return 0;
    if (a === undefined || a === null) return -1;
    if (b === undefined || b === null) return 1;
    return a < b ? -1 : 1;
  }

  function render($table, options) {
    var columns = options.columns || [];
    var rows = (options.data || []).slice();
    var sortColumn = columns.filter(function (c) { return c.field === options.sortName; })[0];
    var sortKey = sortColumn ? sortColumn.sortName || sortColumn.field : options.sortName;
    if (sortKey) {
      rows.sort(function (a, b) { return compare(a[sortKey], b[sortKey]); });
      if (options.sortOrder === "desc") rows.reverse();
    }
    var rowAttributes = named(options.rowAttributes);
    var rowStyle = named(options.rowStyle);
    var $head = $("<tr>");
    columns.forEach(function (c) { $head.append($("<th>").text(c.title || c.field)); });
    var $body = $("<tbody>");
    rows.forEach(function (row, index) {
      var $tr = $("<tr>");
      if (rowAttributes) $tr.attr(rowAttributes(row, index) || {});
      if (rowStyle) $tr.css((rowStyle(row, index) || {}).css || {});
      columns.forEach(function (c) {
        var $td = $("<td>").html(row[c.field] === undefined ? "" : String(row[c.field]));
        if (c.align) $td.css("text-align", c.align);
        $tr.append($td);
      });
      $tr.on("click", function () { $table.trigger("click-row.bs.table", [row, $tr]); });
      $body.append($tr);
    });
    $table.addClass("table table-hover").empty()
      .append($("<thead>").append($head)).append($body);
    if (options.search && options.toolbar) {
      var $search = $('<input type="search" class="form-control form-control-sm ml-1"'
        + ' placeholder="Search" aria-label="Search">');
      $search.on("input", function () {
        var needle = $search.val().toLowerCase();
        $body.children("tr").each(function () {
          $(this).toggle($(this).text().toLowerCase().indexOf(needle) >= 0);
        });
      });
      $(options.toolbar).find("input[type=search]").remove();
      $(options.toolbar).append($search);
      $table.data("offline-search", $search);
    }
  }

  $.fn.bootstrapTable = function (optionsOrMethod) {
    return this.each(function () {
      var $table = $(this);
      if (typeof optionsOrMethod === "string") {
        var $search = $table.data("offline-search");
        if ($search) $search.val("").trigger("input");
        return;
      }
      render($table, optionsOrMethod || {});
    });
  };

  // Bootstrap 5 defines its jQuery plugins ($.fn.modal, ...) only once the page is loaded;
  // the pages call some of them from inline scripts before that.
  var bootstrap = window.bootstrap || {};
  ["Modal", "Collapse", "Tab", "Tooltip", "Popover", "Dropdown"].forEach(function (name) {
    var plugin = name.toLowerCase();
    if (!$.fn[plugin] && bootstrap[name] && bootstrap[name].jQueryInterface) {
      $.fn[plugin] = bootstrap[name].jQueryInterface;
    }
  });

  // Bootstrap 4 markup (data-toggle, data-target) for Bootstrap 5's data API.
  $(function () {
    $("[data-toggle]").not("[data-toggle=table]").each(function () {
      var $el = $(this);
      $el.attr("data-bs-toggle", $el.attr("data-toggle"));
      if ($el.attr("data-target")) $el.attr("data-bs-target", $el.attr("data-target"));
    });
  });
})(window.jQuery);
