/** The j2c icon, for the sidebar tab, the log panels and the toolbar button. */
import { LabIcon } from '@jupyterlab/ui-components';

const computeIconSvg =
  '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
  '<path class="jp-icon3" fill="#616161" d="M4 4h16v10H4zM2 16h20v2H2zm5 3h10v1H7z' +
  'M9 7l-2 3h3l-1 3 4-4h-3l1-2z"/></svg>';

export const computeIcon = new LabIcon({
  name: 'j2c:compute',
  svgstr: computeIconSvg
});
